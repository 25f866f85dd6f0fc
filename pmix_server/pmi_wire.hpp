// SPDX-License-Identifier: Apache-2.0
// pmi_wire.hpp - the PMI-1 and PMI-2 wire protocols as MPICH's built-in
// clients speak them on PMI_FD: requests cut out of a connection's bytes,
// and replies written. No sockets, no state beyond one connection's bytes.
//
// PMI-1: one request per line, "cmd=NAME k=v k=v\n", lock-step; a value
// ends at the first space ("=" inside it is fine); a token without "=" is
// a key with an empty value. Two exceptions: abort's message= runs to the
// end of the line (MPICH writes it unescaped, spaces included), and spawn
// comes as "mcmd=spawn\n" then one "k=v\n" line per argument up to
// "endcmd\n" (one block per command of a multiple spawn).
// PMI-2: each message is a 6-character decimal length (spaces allowed on
// either side of the digits) and that many bytes of "cmd=NAME;k=v;k=v;";
// a value ends at ';' (no escaping), except abort's message=, which runs to
// the end of the body (less one final ';').
// Every connection starts in PMI-1 framing: its first request is
// "cmd=init pmi_version=N pmi_subversion=M" also for PMI-2; after an init
// with pmi_version=2 the parser reads PMI-2 frames.
#pragma once

#include "exitpolicy/result.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exitpolicy::pmix_server::pmi {

// The longest request taken (a line, a frame's body, a spawn block):
// MPICH's own are at most about 1.4 KiB (vallen_max 1024 plus key and
// kvsname); anything longer is not a client of ours.
inline constexpr std::size_t max_request = 64 * 1024;

struct Request {
    int version = 1;   // the framing it came in: 1 or 2
    std::string cmd;   // "init", "put", "kvs-fence", ...; "spawn" for a PMI-1 mcmd=spawn block
    // In the order sent; keys may repeat (a PMI-2 spawn's subcmd segments).
    std::vector<std::pair<std::string, std::string>> args;
    // The first value of `key`, or nullptr.
    const std::string* get(std::string_view key) const noexcept;
};

// One connection's bytes, cut into requests.
class Parser {
public:
    // Appends bytes as read from the connection.
    void feed(std::string_view bytes);
    // The next whole request, if one has come whole (nullopt: wait for
    // more); an error when what came is not PMI (a line that is not
    // "cmd=..." or "mcmd=spawn", a bad length, more than max_request bytes
    // without an end): the caller answers nothing more and closes. After an
    // init with pmi_version=2 what follows is read as PMI-2 frames.
    Result<std::optional<Request>> next();
    // 1 until an init asked for 2.
    int version() const noexcept { return version_; }

private:
    // A PMI-2 frame: a 6-character decimal length, then the body.
    Result<std::optional<Request>> next_frame();
    // MPICH's PMI-1 spawn, "mcmd=spawn" (its line ends at `first_end`)
    // then "k=v" lines up to "endcmd": one request for the whole block.
    Result<std::optional<Request>> next_spawn(std::size_t first_end);

    std::string buf_;
    int version_ = 1;
};

// A reply in `version`'s framing: "cmd=NAME k=v ...\n" for 1,
// "LLLLLLcmd=NAME;k=v;...;" for 2 (the length right-justified in 6
// characters). Values are written as given; an empty value is never
// written (MPICH 4.2's PMI-1 reader rejects "key="), its pair is left out.
std::string reply(int version, std::string_view cmd,
                  const std::vector<std::pair<std::string, std::string>>& args = {});

}  // namespace exitpolicy::pmix_server::pmi
