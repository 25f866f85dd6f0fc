// SPDX-License-Identifier: Apache-2.0
// published_data.hpp - what the step's tasks published (PMIx_Publish), as
// the root of the daemons' tree keeps it, and the lookups that wait for it.
//
// A key is published once: the first publication stands, a second one of
// the same key is refused (PMIX_ERR_DUPLICATE_KEY) and publishes none of
// its keys. A lookup that asks to wait is answered once every key it asks
// for is there; one that does not is answered at once with what there is.
// An unpublish takes back the asking rank's own keys only. Every answer
// goes back to the asking node through `reply`, the root's routing.
//
// FE thread only, as the root (overlay_root.hpp).
#pragma once

#include "protocol/wire.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace exitpolicy::spank_plugin {

class PublishedData {
public:
    using Reply = std::function<void(std::uint32_t node, const protocol::Bytes& frame)>;

    explicit PublishedData(Reply reply) : reply_(std::move(reply)) {}
    PublishedData(const PublishedData&) = delete;
    PublishedData& operator=(const PublishedData&) = delete;

    // A publish, lookup or unpublish from a daemon's client.
    void request(const protocol::DataRequest& r);

private:
    // Answers a lookup if it can: true when answered.
    bool try_lookup(const protocol::DataRequest& r);

    Reply reply_;
    // Key: the rank that published it, and its value.
    std::map<std::string, std::pair<std::uint32_t, protocol::Bytes>> published_;
    std::vector<protocol::DataRequest> waiting_lookups_;
};

}  // namespace exitpolicy::spank_plugin
