// SPDX-License-Identifier: Apache-2.0
// data_upcalls.cpp - publish, lookup, unpublish: the data is kept at srun's
// front end, which answers with PMIx statuses by name (protocol/events.hpp).
#include "upcalls.hpp"

#include "convert.hpp"

#include <string>

namespace exitpolicy::pmix_server {

namespace {

// A reply names each key's publisher in a list the wire bounds
// (protocol::max_ranks): more keys in one call are refused, not cut short.
bool too_many(std::size_t keys)
{
    return keys > protocol::max_ranks;
}

// A lookup's or unpublish's request: the caller and its keys.
protocol::DataRequest by_keys(protocol::DataRequest::Op op, const pmix_proc_t* proc, char** keys)
{
    protocol::DataRequest r;
    r.op = op;
    r.rank = proc->rank;
    r.keys = keys_of(keys);
    return r;
}

// Publish and unpublish: to the FE, whose reply's status is the answer.
pmix_status_t to_front_end(StepServices& step, protocol::DataRequest r, int timeout_s, OpCompletion& done)
{
    step.post([&step, r = std::move(r), timeout_s, done]() mutable {
        step.data_request(std::move(r), timeout_s,
                             [done](const protocol::DataReply& reply) mutable { done.answer(reply.status); });
    });
    return PMIX_SUCCESS;
}

}  // namespace

pmix_status_t on_publish(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cbfunc,
                         void* cbdata) noexcept
{
    return upcall("publish", cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        protocol::DataRequest r;
        r.op = protocol::DataRequest::Op::publish;
        r.rank = proc->rank;
        for (size_t i = 0; i < ninfo; ++i) {
            if (is_directive(info[i].key))
                continue;
            auto packed = pack_info(info[i]);
            if (!packed)
                return done.returned(PMIX_ERR_BAD_PARAM);
            r.keys.emplace_back(info[i].key);
            r.values.push_back(std::move(*packed));
        }
        if (too_many(r.keys.size()))
            return done.returned(PMIX_ERR_BAD_PARAM);
        return to_front_end(step, std::move(r), timeout_of(info, ninfo), done);
    });
}

pmix_status_t on_lookup(const pmix_proc_t* proc, char** keys, const pmix_info_t info[], size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("lookup", cbfunc, cbdata, [&](StepServices& step, LookupCompletion& done) {
        protocol::DataRequest r = by_keys(protocol::DataRequest::Op::lookup, proc, keys);
        if (too_many(r.keys.size()))
            return done.returned(PMIX_ERR_BAD_PARAM);
        r.wait = wait_of(info, ninfo) ? 1 : 0;
        const int timeout_s = timeout_of(info, ninfo);
        std::string nspace = proc->nspace;
        step.post([&step, r = std::move(r), timeout_s, nspace = std::move(nspace), done]() mutable {
            step.data_request(std::move(r), timeout_s, [nspace, done](const protocol::DataReply& reply) mutable {
                done.answer_with([&](pmix_lookup_cbfunc_t cb, void* data) {
                    // The library copies the values before it returns.
                    auto found = to_pdata(reply, nspace);
                    cb(reply.status, found->data, found->n, data);
                });
            });
        });
        return PMIX_SUCCESS;
    });
}

pmix_status_t on_unpublish(const pmix_proc_t* proc, char** keys, const pmix_info_t info[], size_t ninfo,
                           pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("unpublish", cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        protocol::DataRequest r = by_keys(protocol::DataRequest::Op::unpublish, proc, keys);
        if (too_many(r.keys.size()))
            return done.returned(PMIX_ERR_BAD_PARAM);
        return to_front_end(step, std::move(r), timeout_of(info, ninfo), done);
    });
}

}  // namespace exitpolicy::pmix_server
