// SPDX-License-Identifier: Apache-2.0
// group_upcalls.cpp - connect, disconnect and groups among the step's own
// processes: each is a barrier over its participants, carried by the
// overlay as a fence without data (Daemon::fence), so it spans nodes, fails
// at once over a participant known dead and honours PMIX_TIMEOUT as a fence
// does. Another namespace's processes (a spawned job's, say) are refused
// with PMIX_ERR_NOT_SUPPORTED.
//
// The library calls these upcalls once per node, when every local
// participant has called: the barrier over the nodes is the upcall's part.
// A fence over the same set of processes is ordered with them the way the
// processes call them, on every node alike, so the two share the fence's
// instances.
//
// A group's answer always goes through cbfunc: OpenPMIx 5.0 answers only
// the last local caller of a group construct the host refuses by its
// return value, and its node-mates wait for ever.
#include "upcalls.hpp"

#include "convert.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace exitpolicy::pmix_server {

namespace {

// The ranks of a barrier over `procs` (empty: every rank), or the status
// that refuses it: another namespace, a rank the step does not have, or a
// rank spelling that is no process (PMIX_RANK_LOCAL_PEERS, ...).
struct Participants {
    std::vector<std::uint32_t> ranks;
    pmix_status_t refused = PMIX_SUCCESS;
};

Participants participants(const StepServices& step, const pmix_proc_t procs[], size_t nprocs)
{
    const ServedStep& served = step.served();
    const std::string nspace = protocol::step_nspace(served.job_id, served.step_id);
    Participants p;
    if (nprocs == 0) {
        p.refused = PMIX_ERR_BAD_PARAM;
        return p;
    }
    bool everyone = false;
    for (size_t i = 0; i < nprocs; ++i) {
        if (nspace != procs[i].nspace) {
            p.refused = PMIX_ERR_NOT_SUPPORTED;
            return p;
        }
        if (procs[i].rank == PMIX_RANK_WILDCARD) {
            everyone = true;
            continue;
        }
        if (procs[i].rank >= served.ntasks) {
            p.refused = procs[i].rank > PMIX_RANK_VALID ? PMIX_ERR_NOT_SUPPORTED : PMIX_ERR_BAD_PARAM;
            return p;
        }
        p.ranks.push_back(procs[i].rank);
    }
    if (everyone)
        p.ranks.clear();
    std::sort(p.ranks.begin(), p.ranks.end());
    p.ranks.erase(std::unique(p.ranks.begin(), p.ranks.end()), p.ranks.end());
    return p;
}

bool flag_of(const pmix_info_t info[], size_t ninfo, const char* key)
{
    for (size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], key))
            return info[i].value.type != PMIX_BOOL || PMIX_INFO_TRUE(&info[i]);
    return false;
}

// Connect and disconnect: the barrier alone.
pmix_status_t barrier(const char* name, const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                      size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall(name, cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        auto who = participants(step, procs, nprocs);
        if (who.refused != PMIX_SUCCESS)
            return done.returned(who.refused);  // the library answers every local caller
        const int timeout_s = timeout_of(info, ninfo);
        step.post([&step, ranks = std::move(who.ranks), timeout_s, done]() mutable {
            step.fence(std::move(ranks), {}, timeout_s,
                       [done](int status, protocol::Bytes) mutable { done.answer(status); });
        });
        return PMIX_SUCCESS;
    });
}

// A group's context id: unique in the step. The node of the group's lowest
// rank makes it (its node id and how many it has made) and gives it as its
// share of the barrier's data; every other node gives none, so every
// member reads the same 8 bytes.
std::uint64_t next_context_id(std::uint32_t node_id)
{
    static std::uint32_t made = 0;  // loop thread only
    return (static_cast<std::uint64_t>(node_id) + 1) << 32 | ++made;
}

protocol::Bytes context_id_share(const ServedStep& served, const std::vector<std::uint32_t>& ranks)
{
    const std::uint32_t lowest = ranks.empty() ? 0 : ranks.front();
    if (std::find(served.ranks.begin(), served.ranks.end(), lowest) == served.ranks.end())
        return {};
    const std::uint64_t id = next_context_id(served.node_id);
    protocol::Bytes share(8);
    for (int i = 0; i < 8; ++i)
        share[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(id >> (56 - 8 * i));
    return share;
}

std::optional<std::uint64_t> context_id_in(const protocol::Bytes& all)
{
    if (all.size() != 8)
        return std::nullopt;
    std::uint64_t id = 0;
    for (std::uint8_t b : all)
        id = id << 8 | b;
    return id;
}

struct GroupResult {
    std::vector<pmix_proc_t> members;
    std::optional<std::uint64_t> context_id;
};

// The construct's answer: the members, and the context id when asked. The
// library copies what it keeps before it calls the release.
void answer_group(InfoCompletion& done, int status, const GroupResult& result) noexcept
{
    if (status != PMIX_SUCCESS) {
        done.answer(status);
        return;
    }
    done.answer_with([&](pmix_info_cbfunc_t cbfunc, void* cbdata) {
        const size_t ninfo = result.context_id ? 2 : 1;
        pmix_info_t* info = nullptr;
        PMIX_INFO_CREATE(info, ninfo);
        if (!info) {
            cbfunc(PMIX_ERR_NOMEM, nullptr, 0, cbdata, nullptr, nullptr);
            return;
        }
        pmix_data_array_t members;
        members.type = PMIX_PROC;
        members.size = result.members.size();
        members.array = const_cast<pmix_proc_t*>(result.members.data());
        PMIX_INFO_LOAD(&info[0], PMIX_GROUP_MEMBERSHIP, &members, PMIX_DATA_ARRAY);  // copies
        if (result.context_id) {
            const size_t id = *result.context_id;
            PMIX_INFO_LOAD(&info[1], PMIX_GROUP_CONTEXT_ID, &id, PMIX_SIZE);
        }
        struct Owned {
            pmix_info_t* info;
            size_t ninfo;
        };
        auto* owned = new Owned{info, ninfo};
        cbfunc(PMIX_SUCCESS, info, ninfo, cbdata,
               [](void* kept) {
                   auto* o = static_cast<Owned*>(kept);
                   PMIX_INFO_FREE(o->info, o->ninfo);
                   delete o;
               },
               owned);
    });
}

}  // namespace

pmix_status_t on_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return barrier("connect", procs, nprocs, info, ninfo, cbfunc, cbdata);
}

pmix_status_t on_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                            pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return barrier("disconnect", procs, nprocs, info, ninfo, cbfunc, cbdata);
}

// Construct and destruct of a group of the step's own processes with a
// fixed membership (MPI's groups and sessions). Refused: invitations (a
// leader, optional members, members added later) and other namespaces.
pmix_status_t on_group(pmix_group_operation_t op, char[], const pmix_proc_t procs[], size_t nprocs,
                       const pmix_info_t directives[], size_t ndirs, pmix_info_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("group", cbfunc, cbdata, [&](StepServices& step, InfoCompletion& done) {
        auto refuse = [&step, done](pmix_status_t status) mutable {
            step.post([done, status]() mutable { done.answer(status); });
            return PMIX_SUCCESS;
        };
        if (op != PMIX_GROUP_CONSTRUCT && op != PMIX_GROUP_DESTRUCT)
            return refuse(PMIX_ERR_NOT_SUPPORTED);
        // The library made it among this node's processes alone and only
        // tells us.
        if (flag_of(directives, ndirs, PMIX_GROUP_LOCAL_ONLY))
            return refuse(PMIX_SUCCESS);
        if (flag_of(directives, ndirs, PMIX_GROUP_LEADER) || flag_of(directives, ndirs, PMIX_GROUP_OPTIONAL))
            return refuse(PMIX_ERR_NOT_SUPPORTED);
        for (size_t i = 0; i < ndirs; ++i)
            if (PMIX_CHECK_KEY(&directives[i], PMIX_GROUP_ADD_MEMBERS))
                return refuse(PMIX_ERR_NOT_SUPPORTED);
        auto who = participants(step, procs, nprocs);
        if (who.refused != PMIX_SUCCESS)
            return refuse(who.refused);
        const bool construct = op == PMIX_GROUP_CONSTRUCT;
        const bool wants_id = construct && flag_of(directives, ndirs, PMIX_GROUP_ASSIGN_CONTEXT_ID);
        GroupResult result;
        result.members.assign(procs, procs + nprocs);
        const int timeout_s = timeout_of(directives, ndirs);
        step.post([&step, ranks = std::move(who.ranks), result = std::move(result), construct, wants_id, timeout_s,
                   done]() mutable {
            protocol::Bytes share = wants_id ? context_id_share(step.served(), ranks) : protocol::Bytes{};
            step.fence(std::move(ranks), std::move(share), timeout_s,
                       [result = std::move(result), construct, wants_id, done](int status,
                                                                                protocol::Bytes all) mutable {
                           if (status != PMIX_SUCCESS || !construct) {
                               done.answer(status);
                               return;
                           }
                           if (wants_id) {
                               result.context_id = context_id_in(all);
                               if (!result.context_id) {
                                   done.answer(PMIX_ERROR);
                                   return;
                               }
                           }
                           answer_group(done, PMIX_SUCCESS, result);
                       });
        });
        return PMIX_SUCCESS;
    });
}

}  // namespace exitpolicy::pmix_server
