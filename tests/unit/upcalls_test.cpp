// SPDX-License-Identifier: Apache-2.0
// upcalls_test.cpp - every PMIx server upcall answers exactly once, on
// every path: success, an error from the step, the step lost, a `done`
// dropped or called twice, the daemon stopping, an exception of any type
// in the step or in the upcall itself. The PMIx library is real (this
// process is a PMIx server without clients: PmixHost::init); the step
// behind the upcalls is scripted, the one thin boundary faked here.
#include "completion.hpp"
#include "convert.hpp"
#include "pmix_host.hpp"
#include "upcalls.hpp"
#include "work_queue.hpp"

#include <gtest/gtest.h>

#include <pmix.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace exitpolicy::pmix_server {
namespace {

// How the scripted step ends what it is asked.
enum class Way {
    answer,       // done(PMIX_SUCCESS, ...)
    fail,         // done(PMIX_ERR_TIMEOUT): an error from the step
    lost,         // done(PMIX_ERR_PROC_ABORTED): a participant is gone
    twice,        // done(PMIX_SUCCESS) and again done(PMIX_ERR_TIMEOUT)
    drop,         // `done` destroyed uncalled
    throw_std,    // the step throws a std::exception
    throw_other,  // the step throws an int
    stopped,      // the loop no longer runs: posted work is dropped
    post_throws,  // posting itself throws, inside the upcall
};

const char* name(Way w)
{
    switch (w) {
    case Way::answer: return "answer";
    case Way::fail: return "fail";
    case Way::lost: return "lost";
    case Way::twice: return "twice";
    case Way::drop: return "drop";
    case Way::throw_std: return "throw_std";
    case Way::throw_other: return "throw_other";
    case Way::stopped: return "stopped";
    case Way::post_throws: return "post_throws";
    }
    return "?";
}

class Scripted final : public StepServices {
public:
    Way way = Way::answer;
    ServedStep args_;
    std::unique_ptr<WorkQueue> queue = std::make_unique<WorkQueue>();
    std::vector<std::string> calls;

    void post(std::function<void()> fn) override
    {
        if (way == Way::post_throws)
            throw std::bad_alloc();
        queue->push(std::move(fn));
    }
    void fence(std::vector<std::uint32_t>, protocol::Bytes data, int, Done done) override
    {
        calls.push_back("fence");
        end(done, std::move(data));
    }
    void direct_modex(std::uint32_t, int, Done done) override
    {
        calls.push_back("direct_modex");
        end(done, protocol::Bytes{'d', 'm'});
    }
    void abort(std::uint32_t, int, std::string) override { event("abort"); }
    void data_request(protocol::DataRequest request, int, DataDone done) override
    {
        calls.push_back("data");
        protocol::DataReply reply;
        if (request.op == protocol::DataRequest::Op::lookup)
            for (const auto& key : request.keys) {
                pmix_info_t info;
                PMIX_INFO_LOAD(&info, key.c_str(), "value", PMIX_STRING);
                reply.keys.push_back(key);
                reply.ranks.push_back(0);
                reply.values.push_back(*pack_info(info));
                PMIX_INFO_DESTRUCT(&info);
            }
        end_data(done, reply);
    }
    void relay(int, std::uint32_t, protocol::Bytes) override { event("relay"); }
    void terminate_step(const std::string&) override { event("terminate"); }
    void task_log(std::uint32_t, const std::string&) override { event("task_log"); }
    void client_connected(std::uint32_t) override { event("connected"); }
    void client_finalized(std::uint32_t) override { event("finalized"); }
    const ServedStep& served() const noexcept override { return args_; }

    // Starts a case: a fresh queue, closed when the loop is to be gone,
    // and this node's ranks 0 and 1 of 4.
    void begin(Way w)
    {
        way = w;
        calls.clear();
        args_.ranks = {0, 1};
        args_.ntasks = 4;
        queue = std::make_unique<WorkQueue>();
        if (w == Way::stopped)
            queue->close();
    }
    void run() { queue->run(); }

private:
    void maybe_throw()
    {
        if (way == Way::throw_std)
            throw std::runtime_error("the step broke");
        if (way == Way::throw_other)
            throw 7;
    }
    // For requests that carry no `done`: the step can only throw.
    void event(const char* what)
    {
        calls.push_back(what);
        maybe_throw();
    }
    void end(Done& done, protocol::Bytes data)
    {
        maybe_throw();
        switch (way) {
        case Way::fail: done(PMIX_ERR_TIMEOUT, {}); break;
        case Way::lost: done(PMIX_ERR_PROC_ABORTED, {}); break;
        case Way::twice:
            done(PMIX_SUCCESS, data);
            done(PMIX_ERR_TIMEOUT, {});
            break;
        case Way::drop: done = nullptr; break;
        default: done(PMIX_SUCCESS, std::move(data)); break;
        }
    }
    void end_data(DataDone& done, protocol::DataReply reply)
    {
        maybe_throw();
        switch (way) {
        case Way::fail: reply.status = PMIX_ERR_TIMEOUT; break;
        case Way::lost: reply.status = PMIX_ERR_PROC_ABORTED; break;
        case Way::drop: done = nullptr; return;
        default: reply.status = PMIX_SUCCESS; break;
        }
        done(reply);
        if (way == Way::twice) {
            reply.status = PMIX_ERR_TIMEOUT;
            done(reply);
        }
    }
};

Scripted* step = nullptr;

// This process as a PMIx server, through the daemon's own PmixHost.
class PmixServer : public ::testing::Environment {
public:
    void SetUp() override
    {
        char dir[] = "/tmp/ep-upcalls-test.XXXXXX";
        ASSERT_NE(::mkdtemp(dir), nullptr);
        dir_ = dir;
        scripted_.args_.job_id = 5;
        scripted_.args_.step_id = 1;
        scripted_.args_.node_id = 0;
        scripted_.args_.hostname = "node0";
        scripted_.args_.topology = "none";
        host_ = std::make_unique<PmixHost>(scripted_);
        auto ok = host_->init(dir_);
        ASSERT_TRUE(ok) << ok.error();
        step = &scripted_;
    }
    void TearDown() override
    {
        host_.reset();  // PMIx_server_finalize
        step = nullptr;
        std::filesystem::remove_all(dir_);
    }
    PmixHost& host() { return *host_; }

private:
    std::string dir_;
    Scripted scripted_;
    std::unique_ptr<PmixHost> host_;
};

PmixServer* server = nullptr;

// What came back for one upcall: by cbfunc, or by the return value.
struct Answers {
    int calls = 0;
    pmix_status_t status = 1;
    std::string data;
    std::size_t ndata = 0;
    pmix_status_t returned = PMIX_SUCCESS;
    std::optional<std::size_t> context_id;  // a group construct's
    std::size_t members = 0;

    int count() const { return calls + (returned != PMIX_SUCCESS ? 1 : 0); }
    pmix_status_t answer() const { return returned != PMIX_SUCCESS ? returned : status; }
};

void op_cb(pmix_status_t status, void* cbdata)
{
    auto* a = static_cast<Answers*>(cbdata);
    ++a->calls;
    a->status = status;
}

void modex_cb(pmix_status_t status, const char* data, size_t ndata, void* cbdata, pmix_release_cbfunc_t release,
              void* release_cbdata)
{
    auto* a = static_cast<Answers*>(cbdata);
    ++a->calls;
    a->status = status;
    a->data.assign(data ? data : "", data ? ndata : 0);
    if (release)
        release(release_cbdata);
}

void lookup_cb(pmix_status_t status, pmix_pdata_t[], size_t ndata, void* cbdata)
{
    auto* a = static_cast<Answers*>(cbdata);
    ++a->calls;
    a->status = status;
    a->ndata = ndata;
}

void info_cb(pmix_status_t status, pmix_info_t info[], size_t ninfo, void* cbdata, pmix_release_cbfunc_t release,
             void* release_cbdata)
{
    auto* a = static_cast<Answers*>(cbdata);
    ++a->calls;
    a->status = status;
    for (size_t i = 0; i < ninfo; ++i) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_GROUP_CONTEXT_ID) && info[i].value.type == PMIX_SIZE)
            a->context_id = info[i].value.data.size;
        if (PMIX_CHECK_KEY(&info[i], PMIX_GROUP_MEMBERSHIP) && info[i].value.type == PMIX_DATA_ARRAY)
            a->members = info[i].value.data.darray->size;
    }
    if (release)
        release(release_cbdata);
}

pmix_proc_t rank_proc(std::uint32_t rank)
{
    pmix_proc_t p;
    PMIX_PROC_LOAD(&p, "exitpolicy.5.1", rank);
    return p;
}

// One upcall family member: how to call it, and whether the step ends
// it with a `done` (fence, modex, data) or it ends when posted work ran.
struct Upcall {
    const char* name;
    bool has_done;
    std::function<pmix_status_t(Answers&)> call;
};

// A construct over every rank with a context id, as Open MPI 5's
// MPI_Comm_create_from_group asks.
pmix_status_t construct(Answers& a, const char* nspace = "exitpolicy.5.1", const char* flag = nullptr)
{
    pmix_proc_t p;
    PMIX_PROC_LOAD(&p, nspace, PMIX_RANK_WILDCARD);
    pmix_info_t dirs[2];
    bool yes = true;
    PMIX_INFO_LOAD(&dirs[0], PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    const size_t ndirs = flag ? 2 : 1;
    if (flag)
        PMIX_INFO_LOAD(&dirs[1], flag, &yes, PMIX_BOOL);
    char grp[] = "grp";
    const pmix_status_t rc = on_group(PMIX_GROUP_CONSTRUCT, grp, &p, 1, dirs, ndirs, info_cb, &a);
    for (size_t i = 0; i < ndirs; ++i)
        PMIX_INFO_DESTRUCT(&dirs[i]);
    return rc;
}

char key_a[] = "key-a";
char* keys[] = {key_a, nullptr};

std::vector<Upcall> upcalls()
{
    return {
        {"client_connected", false,
         [](Answers& a) {
             auto p = rank_proc(1);
             return on_client_connected(&p, nullptr, op_cb, &a);
         }},
        {"client_finalized", false,
         [](Answers& a) {
             auto p = rank_proc(1);
             return on_client_finalized(&p, nullptr, op_cb, &a);
         }},
        {"abort", false,
         [](Answers& a) {
             auto p = rank_proc(1);
             return on_abort(&p, nullptr, 7, "bye", nullptr, 0, op_cb, &a);
         }},
        {"fence", true,
         [](Answers& a) {
             auto p = rank_proc(PMIX_RANK_WILDCARD);
             char data[] = "mine";
             return on_fence(&p, 1, nullptr, 0, data, 4, modex_cb, &a);
         }},
        {"direct_modex", true,
         [](Answers& a) {
             auto p = rank_proc(3);
             return on_direct_modex(&p, nullptr, 0, modex_cb, &a);
         }},
        {"publish", true,
         [](Answers& a) {
             auto p = rank_proc(0);
             pmix_info_t info;
             PMIX_INFO_LOAD(&info, "key-a", "value", PMIX_STRING);
             const pmix_status_t rc = on_publish(&p, &info, 1, op_cb, &a);
             PMIX_INFO_DESTRUCT(&info);
             return rc;
         }},
        {"lookup", true,
         [](Answers& a) {
             auto p = rank_proc(1);
             return on_lookup(&p, keys, nullptr, 0, lookup_cb, &a);
         }},
        {"unpublish", true,
         [](Answers& a) {
             auto p = rank_proc(0);
             return on_unpublish(&p, keys, nullptr, 0, op_cb, &a);
         }},
        {"job_control", false,
         [](Answers& a) {
             auto p = rank_proc(0);
             pmix_info_t dir;
             bool yes = true;
             PMIX_INFO_LOAD(&dir, PMIX_JOB_CTRL_TERMINATE, &yes, PMIX_BOOL);
             const pmix_status_t rc = on_job_control(&p, nullptr, 0, &dir, 1, info_cb, &a);
             PMIX_INFO_DESTRUCT(&dir);
             return rc;
         }},
        {"connect", true,
         [](Answers& a) {
             auto p = rank_proc(PMIX_RANK_WILDCARD);
             return on_connect(&p, 1, nullptr, 0, op_cb, &a);
         }},
        {"disconnect", true,
         [](Answers& a) {
             pmix_proc_t p[2] = {rank_proc(1), rank_proc(3)};
             return on_disconnect(p, 2, nullptr, 0, op_cb, &a);
         }},
        {"group_construct", true, [](Answers& a) { return construct(a); }},
        {"group_destruct", true,
         [](Answers& a) {
             auto p = rank_proc(PMIX_RANK_WILDCARD);
             char grp[] = "grp";
             return on_group(PMIX_GROUP_DESTRUCT, grp, &p, 1, nullptr, 0, info_cb, &a);
         }},
        {"log", false,
         [](Answers& a) {
             auto p = rank_proc(2);
             pmix_info_t line;
             PMIX_INFO_LOAD(&line, PMIX_LOG_STDERR, "hello", PMIX_STRING);
             on_log(&p, &line, 1, nullptr, 0, op_cb, &a);
             PMIX_INFO_DESTRUCT(&line);
             return PMIX_SUCCESS;  // returns nothing: its answer is cbfunc's
         }},
    };
}

// The status the client must get for `way`.
pmix_status_t expected(const Upcall& u, Way way)
{
    switch (way) {
    case Way::answer:
    case Way::twice: return PMIX_SUCCESS;
    case Way::fail: return u.has_done ? PMIX_ERR_TIMEOUT : PMIX_SUCCESS;
    case Way::lost: return u.has_done ? PMIX_ERR_PROC_ABORTED : PMIX_SUCCESS;
    case Way::drop: return u.has_done ? unanswered : PMIX_SUCCESS;
    case Way::throw_std:
    case Way::throw_other:
    case Way::stopped: return unanswered;
    case Way::post_throws: return PMIX_ERROR;
    }
    return PMIX_ERROR;
}

class EveryPath : public ::testing::TestWithParam<Way> {};

TEST_P(EveryPath, EveryUpcallAnswersExactlyOnce)
{
    const Way way = GetParam();
    for (const Upcall& u : upcalls()) {
        SCOPED_TRACE(std::string(u.name) + " / " + name(way));
        step->begin(way);
        Answers a;
        a.returned = u.call(a);
        step->run();
        EXPECT_EQ(a.count(), 1);
        EXPECT_EQ(a.answer(), expected(u, way));
        // Nothing answers later either: the work is gone, and so is `done`.
        step->run();
        step->queue.reset();
        EXPECT_EQ(a.count(), 1);
    }
}

INSTANTIATE_TEST_SUITE_P(Upcalls, EveryPath,
                         ::testing::Values(Way::answer, Way::fail, Way::lost, Way::twice, Way::drop, Way::throw_std,
                                           Way::throw_other, Way::stopped, Way::post_throws),
                         [](const ::testing::TestParamInfo<Way>& param) { return std::string(name(param.param)); });

TEST(Upcalls, AnswersCarryTheOverlaysData)
{
    step->begin(Way::answer);
    Answers fence;
    auto all = rank_proc(PMIX_RANK_WILDCARD);
    char mine[] = "mine";
    ASSERT_EQ(on_fence(&all, 1, nullptr, 0, mine, 4, modex_cb, &fence), PMIX_SUCCESS);
    Answers lookup;
    auto one = rank_proc(1);
    ASSERT_EQ(on_lookup(&one, keys, nullptr, 0, lookup_cb, &lookup), PMIX_SUCCESS);
    step->run();
    EXPECT_EQ(fence.data, "mine");
    EXPECT_EQ(lookup.ndata, 1u);
    EXPECT_EQ(step->calls, (std::vector<std::string>{"fence", "data"}));
}

TEST(Upcalls, TheAnchorFinalizesWithoutTheLoop)
{
    step->begin(Way::stopped);
    pmix_proc_t anchor;
    PMIX_PROC_LOAD(&anchor, "exitpolicy-anchor.5.1", 0);
    Answers a;
    a.returned = on_client_finalized(&anchor, nullptr, op_cb, &a);
    EXPECT_EQ(a.returned, PMIX_OPERATION_SUCCEEDED);
    EXPECT_EQ(a.calls, 0);
}

TEST(Upcalls, RefusedRequestsAnswerByTheirReturnValue)
{
    step->begin(Way::answer);
    Answers a;
    auto p = rank_proc(0);
    pmix_info_t dir;
    bool yes = true;
    PMIX_INFO_LOAD(&dir, PMIX_JOB_CTRL_PAUSE, &yes, PMIX_BOOL);
    a.returned = on_job_control(&p, nullptr, 0, &dir, 1, info_cb, &a);
    PMIX_INFO_DESTRUCT(&dir);
    step->run();
    EXPECT_EQ(a.returned, PMIX_ERR_NOT_SUPPORTED);
    EXPECT_EQ(a.calls, 0);
    EXPECT_EQ(on_spawn(&p, nullptr, 0, nullptr, 0, nullptr, nullptr), PMIX_ERR_NOT_SUPPORTED);
    // Another namespace's processes: the library answers every local
    // caller of a connect it refuses this way.
    pmix_proc_t other;
    PMIX_PROC_LOAD(&other, "spawned.1", 0);
    pmix_proc_t both[2] = {p, other};
    EXPECT_EQ(on_connect(both, 2, nullptr, 0, op_cb, &a), PMIX_ERR_NOT_SUPPORTED);
    EXPECT_EQ(on_disconnect(both, 2, nullptr, 0, op_cb, &a), PMIX_ERR_NOT_SUPPORTED);
    auto beyond = rank_proc(4);  // the step has 4 ranks
    EXPECT_EQ(on_connect(&beyond, 1, nullptr, 0, op_cb, &a), PMIX_ERR_BAD_PARAM);
    EXPECT_EQ(a.calls, 0);
    EXPECT_TRUE(step->calls.empty());
}

TEST(Upcalls, ConnectAndDisconnectAreBarriersOverTheirParticipants)
{
    step->begin(Way::answer);
    Answers connect, disconnect;
    pmix_proc_t two[2] = {rank_proc(3), rank_proc(1)};
    ASSERT_EQ(on_connect(two, 2, nullptr, 0, op_cb, &connect), PMIX_SUCCESS);
    ASSERT_EQ(on_disconnect(two, 2, nullptr, 0, op_cb, &disconnect), PMIX_SUCCESS);
    step->run();
    EXPECT_EQ(connect.calls, 1);
    EXPECT_EQ(connect.status, PMIX_SUCCESS);
    EXPECT_EQ(disconnect.calls, 1);
    EXPECT_EQ(disconnect.status, PMIX_SUCCESS);
    EXPECT_EQ(step->calls, (std::vector<std::string>{"fence", "fence"}));
}

TEST(Upcalls, AGroupConstructGetsOneContextIdAndItsMembers)
{
    step->begin(Way::answer);
    Answers first, second;
    ASSERT_EQ(construct(first), PMIX_SUCCESS);
    ASSERT_EQ(construct(second), PMIX_SUCCESS);
    step->run();
    ASSERT_EQ(first.calls, 1);
    EXPECT_EQ(first.status, PMIX_SUCCESS);
    ASSERT_TRUE(first.context_id && second.context_id);
    EXPECT_NE(*first.context_id, *second.context_id);
    EXPECT_NE(*first.context_id, 0u);
    EXPECT_EQ(first.members, 1u);  // as the members named it: the wildcard
}

// Every refusal of a group operation comes through cbfunc, after the
// upcall returned: OpenPMIx 5.0 passes a refusal by return value to one
// local member alone, and the others wait for ever.
TEST(Upcalls, AGroupRefusalReachesEveryLocalMember)
{
    struct Case {
        const char* what;
        const char* nspace;
        const char* flag;
        pmix_status_t status;
    };
    const Case cases[] = {
        {"another namespace", "spawned.1", nullptr, PMIX_ERR_NOT_SUPPORTED},
        {"an invitation", "exitpolicy.5.1", PMIX_GROUP_LEADER, PMIX_ERR_NOT_SUPPORTED},
        {"optional members", "exitpolicy.5.1", PMIX_GROUP_OPTIONAL, PMIX_ERR_NOT_SUPPORTED},
        {"made on this node alone", "exitpolicy.5.1", PMIX_GROUP_LOCAL_ONLY, PMIX_SUCCESS},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        step->begin(Way::answer);
        Answers a;
        EXPECT_EQ(construct(a, c.nspace, c.flag), PMIX_SUCCESS);
        EXPECT_EQ(a.calls, 0);
        step->run();
        EXPECT_EQ(a.calls, 1);
        EXPECT_EQ(a.status, c.status);
        EXPECT_TRUE(step->calls.empty());  // no barrier
    }
}

// A construct over ranks the lowest of which is on another node: this
// node gives no share, and the barrier's data names the id (here the
// scripted barrier hands back this node's share alone, none at all).
TEST(Upcalls, AGroupWithoutAContextIdFromAnyNodeFails)
{
    step->begin(Way::answer);
    Answers a;
    pmix_proc_t others[2] = {rank_proc(2), rank_proc(3)};
    pmix_info_t dir;
    bool yes = true;
    PMIX_INFO_LOAD(&dir, PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    char grp[] = "grp";
    ASSERT_EQ(on_group(PMIX_GROUP_CONSTRUCT, grp, others, 2, &dir, 1, info_cb, &a), PMIX_SUCCESS);
    PMIX_INFO_DESTRUCT(&dir);
    step->run();
    EXPECT_EQ(a.calls, 1);
    EXPECT_EQ(a.status, PMIX_ERROR);
}

// A reply names each key's publisher in a bounded list: more keys in one
// call are refused at once, never cut short on the way.
TEST(Upcalls, MoreKeysThanAReplyCanNameAreRefused)
{
    step->begin(Way::answer);
    std::vector<std::string> names(protocol::max_ranks + 1);
    std::vector<char*> many;
    for (std::size_t i = 0; i < names.size(); ++i) {
        names[i] = "k" + std::to_string(i);
        many.push_back(names[i].data());
    }
    many.push_back(nullptr);
    auto p = rank_proc(1);
    Answers lookup, unpublish;
    lookup.returned = on_lookup(&p, many.data(), nullptr, 0, lookup_cb, &lookup);
    unpublish.returned = on_unpublish(&p, many.data(), nullptr, 0, op_cb, &unpublish);
    step->run();
    for (const Answers* a : {&lookup, &unpublish}) {
        EXPECT_EQ(a->returned, PMIX_ERR_BAD_PARAM);
        EXPECT_EQ(a->calls, 0);
    }
    EXPECT_TRUE(step->calls.empty());
}

// notify_event's callback is never called (OpenPMIx 4.2.2 corrupts its
// heap when it is called from another thread): the return value answers,
// whatever the step does with the relay.
TEST(Upcalls, NotifyEventAnswersByItsReturnValueOnly)
{
    for (Way way : {Way::answer, Way::throw_std, Way::throw_other, Way::stopped, Way::post_throws}) {
        SCOPED_TRACE(name(way));
        step->begin(way);
        Answers a;
        auto src = rank_proc(2);
        pmix_info_t info;
        int v = 3;
        PMIX_INFO_LOAD(&info, "ep.custom", &v, PMIX_INT);
        a.returned = on_notify_event(PMIX_ERR_PROC_ABORTED, &src, PMIX_RANGE_SESSION, &info, 1, op_cb, &a);
        PMIX_INFO_DESTRUCT(&info);
        step->run();
        EXPECT_EQ(a.calls, 0);
        EXPECT_EQ(a.returned, way == Way::post_throws ? PMIX_ERROR : PMIX_OPERATION_SUCCEEDED);
        if (way == Way::answer) {
            EXPECT_EQ(step->calls, std::vector<std::string>{"relay"});
        }
    }
    Answers reg;
    EXPECT_EQ(on_register_events(nullptr, 0, nullptr, 0, op_cb, &reg), PMIX_OPERATION_SUCCEEDED);
    EXPECT_EQ(on_deregister_events(nullptr, 0, op_cb, &reg), PMIX_OPERATION_SUCCEEDED);
    EXPECT_EQ(reg.calls, 0);
}

TEST(Upcalls, WithoutAnOverlayTheyAnswerUnreachable)
{
    set_step(nullptr);
    Answers a;
    auto p = rank_proc(1);
    a.returned = on_client_connected(&p, nullptr, op_cb, &a);
    set_step(step);
    EXPECT_EQ(a.returned, unanswered);
    EXPECT_EQ(a.calls, 0);
}

// ---- the Completion itself ----

TEST(Completion, CopiesShareOneAnswer)
{
    Answers a;
    {
        OpCompletion done(op_cb, &a);
        OpCompletion copy = done;
        EXPECT_TRUE(copy.answer(PMIX_ERR_TIMEOUT));
        EXPECT_FALSE(done.answer(PMIX_SUCCESS));
        EXPECT_TRUE(done.answered());
    }
    EXPECT_EQ(a.calls, 1);
    EXPECT_EQ(a.status, PMIX_ERR_TIMEOUT);
}

TEST(Completion, TheLastCopyDroppedAnswersUnanswered)
{
    Answers a;
    {
        OpCompletion done(op_cb, &a);
        auto later = std::make_unique<OpCompletion>(done);
        EXPECT_TRUE(later->shared());
    }
    EXPECT_EQ(a.calls, 1);
    EXPECT_EQ(a.status, unanswered);
}

TEST(Completion, ReturnedNeverCallsBack)
{
    Answers a;
    {
        OpCompletion done(op_cb, &a);
        EXPECT_EQ(done.returned(PMIX_ERR_BAD_PARAM), PMIX_ERR_BAD_PARAM);
    }
    EXPECT_EQ(a.calls, 0);
}

TEST(Completion, AThrowingAnswerStillAnswersOnce)
{
    Answers a;
    ModexCompletion done(modex_cb, &a);
    EXPECT_TRUE(done.answer_with([](pmix_modex_cbfunc_t, void*) { throw 1; }));
    EXPECT_FALSE(done.answer(PMIX_SUCCESS));
    EXPECT_EQ(a.calls, 1);
    EXPECT_EQ(a.status, PMIX_ERROR);
}

TEST(Completion, GuardTurnsAnyExceptionIntoOneAnswer)
{
    Answers before;  // nothing left the upcall: the return value answers
    EXPECT_EQ(guard_upcall("t", op_cb, &before, [](OpCompletion&) -> pmix_status_t { throw 1; }), PMIX_ERROR);
    EXPECT_EQ(before.calls, 0);
    Answers after;  // a copy left: cbfunc answers, and the upcall returns success
    std::optional<OpCompletion> kept;
    EXPECT_EQ(guard_upcall("t", op_cb, &after,
                           [&](OpCompletion& done) -> pmix_status_t {
                               kept = done;
                               throw std::runtime_error("late");
                           }),
              PMIX_SUCCESS);
    EXPECT_EQ(after.calls, 1);
    EXPECT_EQ(after.status, PMIX_ERROR);
    kept.reset();
    EXPECT_EQ(after.calls, 1);
}

// ---- the work queue ----

TEST(WorkQueue, RunSurvivesAnyExceptionAndGoesOn)
{
    WorkQueue q;
    int ran = 0;
    q.push([] { throw 42; });
    q.push([] { throw std::runtime_error("x"); });
    q.push([&] { ++ran; });
    q.run();
    EXPECT_EQ(ran, 1);
}

TEST(WorkQueue, ClosedDropsWorkUncalledAndDestroysIt)
{
    WorkQueue q;
    Answers a;
    int ran = 0;
    q.push([&, done = OpCompletion(op_cb, &a)] { ++ran; });
    q.close();
    EXPECT_EQ(a.calls, 1);  // destroyed: answered
    EXPECT_FALSE(q.push([&, done = OpCompletion(op_cb, &a)] { ++ran; }));
    EXPECT_EQ(a.calls, 2);
    q.run();
    EXPECT_EQ(ran, 0);
}

// ---- namespace registration ----

protocol::StepMap two_node_map(const std::string& nspace)
{
    protocol::StepMap map;
    map.nspace = nspace;
    map.hostnames = {"node0", "node1"};
    map.rank_node = {0, 0, 1};
    return map;
}

// Runs the loop's work until `done` ran (the library answers on its own
// thread), at most 10 s.
bool wait_for(const int& calls)
{
    for (int i = 0; i < 1000 && calls == 0; ++i) {
        step->run();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    step->run();
    return calls > 0;
}

// Registers `map` (the step's local ranks set by the caller): done runs
// once, with success, and `rank` then gets its environment.
void expect_registered(const protocol::StepMap& map, std::uint32_t rank)
{
    int calls = 0, status = 1;
    auto ok = server->host().register_namespace(map, [&](int st) {
        ++calls;
        status = st;
    });
    ASSERT_TRUE(ok) << ok.error();
    ASSERT_TRUE(wait_for(calls));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    step->run();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(status, PMIX_SUCCESS);
    auto env = server->host().environment(rank);
    ASSERT_TRUE(env) << env.error();
    EXPECT_FALSE(env->empty());
}

TEST(Registration, DoneRunsOnceWhenEveryLocalClientIsIn)
{
    step->begin(Way::answer);
    step->args_.ranks = {0, 1};
    expect_registered(two_node_map("exitpolicy.5.1"), 1);
}

TEST(Registration, TheMapsArePlainLists)
{
    const auto maps = namespace_maps({"node0", "node1", "node2"}, {0, 0, 2, 1, 2});
    EXPECT_EQ(maps.nodes, "node0,node1,node2");
    EXPECT_EQ(maps.procs, "0,1;3;2,4");
    EXPECT_EQ(namespace_maps({"node1"}, {0}).procs, "0");
}

// 1 024 ranks here and 1 024 elsewhere, on 600 nodes of long names: maps of
// several KiB, which OpenPMIx 7's PMIx_generate_ppn and _regex compress into
// blobs that a string cannot carry (the library refused the namespace with
// PMIX_ERR_BAD_PARAM, and every client of such a step failed).
TEST(Registration, AStepOfThousandsOfRanksRegisters)
{
    step->begin(Way::answer);
    constexpr std::uint32_t local = 1024;
    protocol::StepMap map;
    map.nspace = "exitpolicy.5.3";
    for (int n = 0; n < 600; ++n)
        map.hostnames.push_back("compute-rack" + std::to_string(n / 40) + "-node" + std::to_string(n));
    step->args_.ranks.clear();
    for (std::uint32_t r = 0; r < local; ++r) {
        map.rank_node.push_back(0);
        step->args_.ranks.push_back(r);
    }
    for (std::uint32_t r = 0; r < local; ++r)
        map.rank_node.push_back(1 + r % 599);
    const auto maps = namespace_maps(map.hostnames, map.rank_node);
    ASSERT_GT(maps.nodes.size(), 8192u);
    ASSERT_GT(maps.procs.size(), 8192u);
    expect_registered(map, local - 1);
}

// The library refuses this namespace (a node without local ranks, which
// Slurm never starts, gives it no local peers): done runs once, with the
// library's status, and no client is waited for.
TEST(Registration, ARefusedNamespaceIsDoneOnce)
{
    step->begin(Way::answer);
    step->args_.ranks = {};
    int calls = 0, status = 1;
    auto map = two_node_map("exitpolicy.5.2");
    map.rank_node = {1, 1};
    auto ok = server->host().register_namespace(map, [&](int st) {
        ++calls;
        status = st;
    });
    if (!ok)
        return;  // refused at once: nothing to wait for
    ASSERT_TRUE(wait_for(calls));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    step->run();
    EXPECT_EQ(calls, 1);
    RecordProperty("library_status", status);
}

}  // namespace
}  // namespace exitpolicy::pmix_server

int main(int argc, char** argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    exitpolicy::pmix_server::server = new exitpolicy::pmix_server::PmixServer;
    ::testing::AddGlobalTestEnvironment(exitpolicy::pmix_server::server);
    return RUN_ALL_TESTS();
}
