// SPDX-License-Identifier: Apache-2.0
// wire_fuzz.cpp - libFuzzer target for the frame codec (protocol/wire).
//
// An input is what a peer could send on a connection: a stream of frames.
// Each header is checked as the receiving side checks it (the trusted
// bound: after authentication), each body is decoded as its type says, and
// whatever a decoder accepts must encode back to exactly the same frame:
// nothing read past the body, nothing silently skipped or normalised. A
// crash, a sanitizer report or a broken round trip is a finding.
//
// Build and run: bash tests/fuzz/run.sh [SECONDS]
#include "protocol/wire.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace {

using namespace exitpolicy::protocol;

template <typename M>
void round_trip(std::span<const std::uint8_t> body)
{
    auto m = M::decode(body);
    if (!m)
        return;
    const Bytes frame = m->encode();
    const std::span<const std::uint8_t> again(frame.data() + header_size, frame.size() - header_size);
    if (!std::equal(again.begin(), again.end(), body.begin(), body.end())) {
        std::fprintf(stderr, "a decoded %s frame does not encode back to its bytes\n",
                     std::string(type_name(Type(frame[3]))).c_str());
        std::abort();
    }
}

void decode(Type type, std::span<const std::uint8_t> body)
{
    switch (type) {
    case Type::challenge: return round_trip<Challenge>(body);
    case Type::hello: return round_trip<Hello>(body);
    case Type::welcome: return round_trip<Welcome>(body);
    case Type::outcome: return round_trip<Outcome>(body);
    case Type::ack: return round_trip<Ack>(body);
    case Type::enroll: return round_trip<Enroll>(body);
    case Type::step_map: return round_trip<StepMap>(body);
    case Type::event: return round_trip<Event>(body);
    case Type::fence_up: return round_trip<FenceUp>(body);
    case Type::fence_down: return round_trip<FenceDown>(body);
    case Type::dmodex_req: return round_trip<DmodexReq>(body);
    case Type::dmodex_resp: return round_trip<DmodexResp>(body);
    case Type::abort: return round_trip<Abort>(body);
    case Type::terminate: return round_trip<Terminate>(body);
    case Type::notice: return round_trip<Notice>(body);
    case Type::env_request: return round_trip<EnvRequest>(body);
    case Type::env_reply: return round_trip<EnvReply>(body);
    case Type::stop: return round_trip<Stop>(body);
    case Type::data_request: return round_trip<DataRequest>(body);
    case Type::data_reply: return round_trip<DataReply>(body);
    case Type::relay: return round_trip<Relay>(body);
    case Type::gone: return round_trip<Gone>(body);
    case Type::node_down: return round_trip<NodeDown>(body);
    case Type::outcomes: return round_trip<Outcomes>(body);
    case Type::acks: return round_trip<Acks>(body);
    case Type::step_done: return round_trip<StepDone>(body);
    case Type::task_started: return round_trip<TaskStarted>(body);
    case Type::standby: return round_trip<Standby>(body);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::span<const std::uint8_t> in(data, size);
    while (in.size() >= header_size) {
        const std::span<const std::uint8_t, header_size> head(in.data(), header_size);
        (void)decode_header(head);  // the pre-authentication bound
        const auto h = decode_header(head, max_body_trusted);
        if (!h || in.size() - header_size < h->length)
            return 0;
        decode(h->type, in.subspan(header_size, h->length));
        in = in.subspan(header_size + h->length);
    }
    return 0;
}
