// SPDX-License-Identifier: Apache-2.0
// topology.cpp - the node's hardware topology for the clients (PmixHost).
#include "pmix_host.hpp"

#include "pmix_server/log.hpp"

#include <hwloc.h>

#include <fstream>
#include <sstream>

namespace exitpolicy::pmix_server {

void PmixHost::discover_topology()
{
    const std::string source = step_.served().topology;
    if (source == "none")
        return;
    try {
        topology_thread_ = std::thread([this, source] {
            if (source != "discover") {
                std::ifstream in(source);
                std::ostringstream xml;
                xml << in.rdbuf();
                if (in && xml.str().find("<topology") != std::string::npos) {
                    topology_xml_ = xml.str();
                    return;
                }
                log::info("cannot read an hwloc topology from %s: discovering it", source.c_str());
            }
            topology_xml_ = topology_xml();
        });
    } catch (const std::exception& e) {
        log::info("no hardware topology for the clients (%s): each discovers its own", e.what());
    }
}

// The node's hardware topology as hwloc XML, discovered once here: given to
// the clients with the job info (PMIX_HWLOC_XML_V2), it spares each of them
// its own discovery, which Open MPI otherwise does in every process (some
// 60 ms each on a small machine, 8 processes at once). I/O devices are kept
// as Open MPI keeps them. Empty when hwloc fails: clients then discover.
std::string PmixHost::topology_xml()
{
    hwloc_topology_t topology = nullptr;
    if (hwloc_topology_init(&topology) != 0)
        return {};
    std::string xml;
    char* buffer = nullptr;
    int length = 0;
    if (hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) == 0 &&
        hwloc_topology_load(topology) == 0 &&
        hwloc_topology_export_xmlbuffer(topology, &buffer, &length, 0) == 0 && buffer && length > 0) {
        xml.assign(buffer, static_cast<std::size_t>(length - 1));  // without the final NUL
        hwloc_free_xmlbuffer(topology, buffer);
    } else {
        log::info("no hardware topology for the clients (hwloc failed): each discovers its own");
    }
    hwloc_topology_destroy(topology);
    return xml;
}

}  // namespace exitpolicy::pmix_server
