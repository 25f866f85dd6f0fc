// SPDX-License-Identifier: Apache-2.0
// published_data.cpp - published data at the root of the daemons' tree, on
// the FE thread. See published_data.hpp.
#include "published_data.hpp"
#include "user_line.hpp"

#include "protocol/events.hpp"

#include <algorithm>

namespace exitpolicy::spank_plugin {

bool PublishedData::try_lookup(const protocol::DataRequest& r)
{
    protocol::DataReply reply{r.id, r.node, 0, {}, {}, {}};
    for (const auto& key : r.keys) {
        auto it = published_.find(key);
        if (it == published_.end())
            continue;
        reply.keys.push_back(key);
        reply.ranks.push_back(it->second.first);
        reply.values.push_back(it->second.second);
    }
    const bool all = reply.keys.size() == r.keys.size();
    if (!all && r.wait)
        return false;
    if (reply.keys.empty())
        reply.status = protocol::pmix::not_found;
    auto frame = reply.encode();
    if (frame.empty()) {
        // More than a frame carries: the lookup fails, the link goes on.
        user_line("a lookup of %zu keys by rank %u finds more than one frame carries (%u MiB): it fails",
                  r.keys.size(), r.rank, static_cast<unsigned>(protocol::max_body_trusted >> 20));
        frame = protocol::DataReply{r.id, r.node, protocol::pmix::out_of_resource, {}, {}, {}}.encode();
    }
    reply_(r.node, frame);
    return true;
}

void PublishedData::request(const protocol::DataRequest& r)
{
    using Op = protocol::DataRequest::Op;
    protocol::DataReply reply{r.id, r.node, 0, {}, {}, {}};
    switch (r.op) {
    case Op::publish:
        for (std::size_t i = 0; i < r.keys.size(); ++i)
            if (published_.count(r.keys[i]))
                reply.status = protocol::pmix::duplicate_key;  // the first publication stands
        if (reply.status == protocol::pmix::success)
            for (std::size_t i = 0; i < r.keys.size(); ++i)
                published_[r.keys[i]] = {r.rank, r.values[i]};
        reply_(r.node, reply.encode());
        std::erase_if(waiting_lookups_, [this](const protocol::DataRequest& w) { return try_lookup(w); });
        return;
    case Op::lookup:
        if (!try_lookup(r))
            waiting_lookups_.push_back(r);
        return;
    case Op::unpublish:
        std::erase_if(published_, [&](const auto& kv) {
            return kv.second.first == r.rank &&
                   (r.keys.empty() || std::find(r.keys.begin(), r.keys.end(), kv.first) != r.keys.end());
        });
        reply_(r.node, reply.encode());
        return;
    }
}

}  // namespace exitpolicy::spank_plugin
