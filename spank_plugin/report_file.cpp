// SPDX-License-Identifier: Apache-2.0
// report_file.cpp - see report_file.hpp.
#include "report_file.hpp"

#include "protocol/fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace exitpolicy::spank_plugin {
namespace {

const char* kind_of(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "is a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "is a device";
    if (S_ISDIR(mode))
        return "is a directory";
    if (S_ISSOCK(mode))
        return "is a socket";
    return "is not a plain file";
}

}  // namespace

Result<bool> write_report_file(const std::string& path, const std::string& text)
{
    using R = Result<bool>;
    // Not blocking: a FIFO with no reader fails at once (ENXIO), one with
    // a reader is refused below.
    protocol::Fd fd(
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644));
    if (!fd) {
        // What is there, named (the kernel refuses a link in a sticky
        // directory with EACCES, not ELOOP).
        const int err = errno;
        struct stat there{};
        if (::lstat(path.c_str(), &there) == 0 && S_ISLNK(there.st_mode))
            return R::fail("it is a symbolic link");
        if (err == ENXIO)
            return R::fail(std::string("it ") + kind_of(there.st_mode) + " that nobody reads");
        return R::fail(std::strerror(err));
    }
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0)
        return R::fail(std::strerror(errno));
    if (!S_ISREG(st.st_mode))
        return R::fail(std::string("it ") + kind_of(st.st_mode));
    if (st.st_uid != ::geteuid())
        return R::fail("it belongs to uid " + std::to_string(st.st_uid));
    if (st.st_nlink != 1)
        return R::fail("it has another name (a hard link)");
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0 || ::ftruncate(fd.get(), 0) != 0)
        return R::fail(std::strerror(errno));
    for (std::size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
        if (n > 0)
            done += static_cast<std::size_t>(n);
        else if (n == 0)
            return R::fail(std::strerror(EIO));
        else if (errno != EINTR)
            return R::fail(std::strerror(errno));
    }
    // Close's own failure (a full quota on NFS) is the write's.
    if (::close(fd.release()) != 0)
        return R::fail(std::strerror(errno));
    return R::ok(true);
}

}  // namespace exitpolicy::spank_plugin
