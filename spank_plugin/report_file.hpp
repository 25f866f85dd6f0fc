// SPDX-License-Identifier: Apache-2.0
// report_file.hpp - the JSON report's file (--exit-report-json=PATH), as
// srun's user writes it. PATH is often in a directory others share (/tmp,
// a project's scratch): whatever another user planted there under that
// name must neither redirect the report, nor hold srun, nor read it. So
// the report goes only into a plain file of the user's own with no other
// name (made if missing, 0644); a symbolic link, a FIFO (its open would
// wait for a reader for ever), a device, a directory, another user's file
// or a hard link is refused with the reason, and nothing is written.
#pragma once

#include "exitpolicy/result.hpp"

#include <string>

namespace exitpolicy::spank_plugin {

// Writes `text` as the whole file at `path`; the reason where it cannot,
// for the user: what is there, refused ("it is a FIFO", "it belongs to uid
// 4242", ...), or the system's error ("Permission denied").
Result<bool> write_report_file(const std::string& path, const std::string& text);

// Whether write_report_file's reason is a refusal of what is there.
inline bool refused_report_file(const std::string& reason)
{
    return reason.rfind("it ", 0) == 0;
}

}  // namespace exitpolicy::spank_plugin
