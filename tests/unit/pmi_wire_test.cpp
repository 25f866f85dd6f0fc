// SPDX-License-Identifier: Apache-2.0
// pmi_wire_test.cpp - the PMI-1 and PMI-2 wire: what MPICH's clients send,
// cut into requests however the bytes arrive, what is not PMI refused, and
// the replies written.
#include "pmi_wire.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy::pmix_server::pmi {
namespace {

using Args = std::vector<std::pair<std::string, std::string>>;

struct Expected {
    int version;
    std::string cmd;
    Args args;
};

// Every request `p` has whole, in order; fails the test on an error.
std::vector<Request> take_all(Parser& p)
{
    std::vector<Request> out;
    for (;;) {
        auto r = p.next();
        EXPECT_TRUE(r) << r.error();
        if (!r || !*r)
            return out;
        out.push_back(std::move(**r));
    }
}

std::vector<Request> parse_all(std::string_view bytes)
{
    Parser p;
    p.feed(bytes);
    return take_all(p);
}

// The same bytes, fed one at a time, asking for a request after each.
std::vector<Request> parse_byte_by_byte(Parser& p, std::string_view bytes)
{
    std::vector<Request> out;
    for (const char c : bytes) {
        p.feed(std::string_view(&c, 1));
        auto got = take_all(p);
        for (auto& r : got)
            out.push_back(std::move(r));
    }
    return out;
}

void expect_request(const Request& r, const Expected& e, const std::string& where)
{
    EXPECT_EQ(r.version, e.version) << where;
    EXPECT_EQ(r.cmd, e.cmd) << where;
    EXPECT_EQ(r.args, e.args) << where;
}

void expect_requests(const std::vector<Request>& got, const std::vector<Expected>& want, const std::string& where)
{
    ASSERT_EQ(got.size(), want.size()) << where;
    for (std::size_t i = 0; i < got.size(); ++i)
        expect_request(got[i], want[i], where + " #" + std::to_string(i));
}

// The error `bytes` get from a parser, "" when none.
std::string error_of(Parser& p, std::string_view bytes)
{
    p.feed(bytes);
    for (;;) {
        auto r = p.next();
        if (!r)
            return r.error();
        if (!*r)
            return "";
    }
}

std::string error_of(std::string_view bytes)
{
    Parser p;
    return error_of(p, bytes);
}

const std::string pmi2_init = "cmd=init pmi_version=2 pmi_subversion=0\n";

// A parser past a PMI-2 client's init.
Parser pmi2_parser()
{
    Parser p;
    p.feed(pmi2_init);
    auto r = p.next();
    EXPECT_TRUE(r && *r && (*r)->cmd == "init");
    EXPECT_EQ(p.version(), 2);
    return p;
}

// A PMI-2 frame as MPICH writes it: "%6u" then the body.
std::string frame(std::string_view body)
{
    std::string length = std::to_string(body.size());
    return std::string(6 - length.size(), ' ') + length + std::string(body);
}

TEST(PmiWireTest, EveryPmi1RequestMpichSendsComesOutWithItsArguments)
{
    const std::vector<std::pair<std::string, Expected>> cases = {
        {"cmd=init pmi_version=1 pmi_subversion=1\n",
         {1, "init", {{"pmi_version", "1"}, {"pmi_subversion", "1"}}}},
        {"cmd=get_maxes\n", {1, "get_maxes", {}}},
        {"cmd=get_appnum\n", {1, "get_appnum", {}}},
        {"cmd=get_my_kvsname\n", {1, "get_my_kvsname", {}}},
        {"cmd=get_universe_size\n", {1, "get_universe_size", {}}},
        {"cmd=put kvsname=kvs_42_0 key=P0-businesscard value=description#node1$port#36$ifname#10.0.0.1$\n",
         {1, "put", {{"kvsname", "kvs_42_0"}, {"key", "P0-businesscard"}, {"value", "description#node1$port#36$ifname#10.0.0.1$"}}}},
        {"cmd=get kvsname=kvs_42_0 key=PMI_process_mapping\n",
         {1, "get", {{"kvsname", "kvs_42_0"}, {"key", "PMI_process_mapping"}}}},
        {"cmd=barrier_in\n", {1, "barrier_in", {}}},
        {"cmd=finalize\n", {1, "finalize", {}}},
        {"cmd=abort exitcode=7\n", {1, "abort", {{"exitcode", "7"}}}},
        {"cmd=publish_name service=ocean port=tag#0$\n",
         {1, "publish_name", {{"service", "ocean"}, {"port", "tag#0$"}}}},
        {"cmd=lookup_name service=ocean\n", {1, "lookup_name", {{"service", "ocean"}}}},
        {"cmd=unpublish_name service=ocean\n", {1, "unpublish_name", {{"service", "ocean"}}}},
        {"cmd=initack pmiid=3\n", {1, "initack", {{"pmiid", "3"}}}},
    };
    for (const auto& [input, want] : cases)
        expect_requests(parse_all(input), {want}, input);
}

TEST(PmiWireTest, APmi1ValueEndsAtTheFirstSpaceAndMayContainEqualsSigns)
{
    const std::vector<std::pair<std::string, Expected>> cases = {
        {"cmd=put kvsname=K key=k value=segments=3\n",
         {1, "put", {{"kvsname", "K"}, {"key", "k"}, {"value", "segments=3"}}}},
        {"cmd=put key=a=b=c= value==\n", {1, "put", {{"key", "a=b=c="}, {"value", "="}}}},
        {"cmd=get key= kvsname=K\n", {1, "get", {{"key", ""}, {"kvsname", "K"}}}},
        {"cmd=put value=two words\n", {1, "put", {{"value", "two"}, {"words", ""}}}},
    };
    for (const auto& [input, want] : cases)
        expect_requests(parse_all(input), {want}, input);
}

TEST(PmiWireTest, APmi1TokenWithoutEqualsIsAKeyWithAnEmptyValue)
{
    const std::vector<std::pair<std::string, Expected>> cases = {
        {"cmd=get_maxes verbose\n", {1, "get_maxes", {{"verbose", ""}}}},
        {"cmd=put a b=1 c\n", {1, "put", {{"a", ""}, {"b", "1"}, {"c", ""}}}},
    };
    for (const auto& [input, want] : cases)
        expect_requests(parse_all(input), {want}, input);
}

TEST(PmiWireTest, SpacesAroundAndBetweenPmi1TokensAreIgnored)
{
    const std::vector<std::pair<std::string, Expected>> cases = {
        {"   cmd=get kvsname=K key=k\n", {1, "get", {{"kvsname", "K"}, {"key", "k"}}}},
        {"cmd=get    kvsname=K  key=k   \n", {1, "get", {{"kvsname", "K"}, {"key", "k"}}}},
        {"cmd=barrier_in \n", {1, "barrier_in", {}}},
    };
    for (const auto& [input, want] : cases)
        expect_requests(parse_all(input), {want}, input);
}

TEST(PmiWireTest, AnAbortsMessageRunsToTheEndOfTheLine)
{
    const std::vector<std::pair<std::string, Expected>> cases = {
        // MPICH 4.0.2: no message.
        {"cmd=abort exitcode=7\n", {1, "abort", {{"exitcode", "7"}}}},
        // MPICH 4.2.1: the message unescaped, spaces, '=' and all.
        {"cmd=abort exitcode=7 message=application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5\n",
         {1, "abort",
          {{"exitcode", "7"}, {"message", "application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5"}}}},
        {"cmd=abort exitcode=1 message=x=1  y=2 key=v\n",
         {1, "abort", {{"exitcode", "1"}, {"message", "x=1  y=2 key=v"}}}},
        {"cmd=abort exitcode=1 message=\n", {1, "abort", {{"exitcode", "1"}, {"message", ""}}}},
        // Only abort's message: any other command's value ends at a space.
        {"cmd=put message=a b\n", {1, "put", {{"message", "a"}, {"b", ""}}}},
    };
    for (const auto& [input, want] : cases)
        expect_requests(parse_all(input), {want}, input);
}

TEST(PmiWireTest, AnAbortsMessageWithANewlineEndsAtItsFirstLine)
{
    Parser p;
    p.feed("cmd=abort exitcode=3 message=first line\nsecond line\n");
    auto r = p.next();
    ASSERT_TRUE(r) << r.error();
    ASSERT_TRUE(*r);
    expect_request(**r, {1, "abort", {{"exitcode", "3"}, {"message", "first line"}}}, "abort");
    // What follows is not PMI; the server reads nothing after an abort anyway.
    EXPECT_FALSE(p.next());
}

const std::string spawn_block =
    "mcmd=spawn\nnprocs=2\nexecname=./a\ntotspawns=1\nspawnssofar=1\narg1=x y\nargcnt=1\n"
    "preput_num=0\ninfo_num=0\nendcmd\n";

const Expected spawn_request{1,
                             "spawn",
                             {{"nprocs", "2"},
                              {"execname", "./a"},
                              {"totspawns", "1"},
                              {"spawnssofar", "1"},
                              {"arg1", "x y"},
                              {"argcnt", "1"},
                              {"preput_num", "0"},
                              {"info_num", "0"}}};

TEST(PmiWireTest, ASpawnBlockIsOneRequestWithItsLinesInOrder)
{
    expect_requests(parse_all(spawn_block), {spawn_request}, "spawn");
}

TEST(PmiWireTest, TwoSpawnBlocksBackToBackAreTwoRequests)
{
    const std::string second =
        "mcmd=spawn\nnprocs=1\nexecname=./b\ntotspawns=2\nspawnssofar=2\nargcnt=0\npreput_num=1\n"
        "preput_key_0=k\npreput_val_0=a=b\ninfo_num=0\nendcmd\n";
    const Expected second_request{1,
                                  "spawn",
                                  {{"nprocs", "1"},
                                   {"execname", "./b"},
                                   {"totspawns", "2"},
                                   {"spawnssofar", "2"},
                                   {"argcnt", "0"},
                                   {"preput_num", "1"},
                                   {"preput_key_0", "k"},
                                   {"preput_val_0", "a=b"},
                                   {"info_num", "0"}}};
    expect_requests(parse_all(spawn_block + second + "cmd=barrier_in\n"),
                    {spawn_request, second_request, {1, "barrier_in", {}}}, "two spawns");
}

TEST(PmiWireTest, ASpawnBlockWaitsForItsEndcmd)
{
    Parser p;
    p.feed(spawn_block.substr(0, spawn_block.size() - 1));  // "endcmd" without its newline
    auto r = p.next();
    ASSERT_TRUE(r) << r.error();
    EXPECT_FALSE(*r);
    p.feed("\n");
    expect_requests(take_all(p), {spawn_request}, "spawn");
}

TEST(PmiWireTest, AnInitAskingForPmi2SwitchesToPmi2Frames)
{
    Parser p;
    EXPECT_EQ(p.version(), 1);
    p.feed(pmi2_init);
    auto init = p.next();
    ASSERT_TRUE(init) << init.error();
    ASSERT_TRUE(*init);
    expect_request(**init, {1, "init", {{"pmi_version", "2"}, {"pmi_subversion", "0"}}}, "init");
    EXPECT_EQ(p.version(), 2);
    p.feed(frame("cmd=fullinit;pmirank=5;threaded=FALSE;"));
    expect_requests(take_all(p), {{2, "fullinit", {{"pmirank", "5"}, {"threaded", "FALSE"}}}}, "fullinit");
    // A PMI-1 line is not a PMI-2 frame any more.
    EXPECT_NE(error_of(p, "cmd=barrier_in\n"), "");
}

TEST(PmiWireTest, AnInitAskingForPmi1StaysOnPmi1Lines)
{
    Parser p;
    p.feed("cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\n");
    const auto got = take_all(p);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].cmd, "get_maxes");
    EXPECT_EQ(got[1].version, 1);
    EXPECT_EQ(p.version(), 1);
}

TEST(PmiWireTest, EveryPmi2RequestMpichSendsComesOutWithItsArguments)
{
    const std::vector<std::pair<std::string, Expected>> cases = {
        {"cmd=fullinit;pmirank=0;", {2, "fullinit", {{"pmirank", "0"}}}},
        {"cmd=job-getid;", {2, "job-getid", {}}},
        {"cmd=kvs-put;key=P3-businesscard;value=port#4$ifname#10.0.0.1$;",
         {2, "kvs-put", {{"key", "P3-businesscard"}, {"value", "port#4$ifname#10.0.0.1$"}}}},
        {"cmd=kvs-fence;", {2, "kvs-fence", {}}},
        {"cmd=kvs-get;jobid=kvs_42_0;srcid=-1;key=PMI_process_mapping;",
         {2, "kvs-get", {{"jobid", "kvs_42_0"}, {"srcid", "-1"}, {"key", "PMI_process_mapping"}}}},
        {"cmd=info-getnodeattr;key=shm_seg;wait=TRUE;",
         {2, "info-getnodeattr", {{"key", "shm_seg"}, {"wait", "TRUE"}}}},
        {"cmd=info-putnodeattr;key=shm_seg;value=segments=3;",
         {2, "info-putnodeattr", {{"key", "shm_seg"}, {"value", "segments=3"}}}},
        {"cmd=info-getjobattr;key=universeSize;", {2, "info-getjobattr", {{"key", "universeSize"}}}},
        {"cmd=finalize;", {2, "finalize", {}}},
        {"cmd=abort;isworldabort=TRUE;message=application called MPI_Abort; rc=7 ;;x=1;",
         {2, "abort", {{"isworldabort", "TRUE"}, {"message", "application called MPI_Abort; rc=7 ;;x=1"}}}},
        {"cmd=abort;isworldabort=FALSE;message=no final semicolon",
         {2, "abort", {{"isworldabort", "FALSE"}, {"message", "no final semicolon"}}}},
        {"cmd=abort;message=;", {2, "abort", {{"message", ""}}}},
        // A value with spaces: they are the value's in PMI-2.
        {"cmd=kvs-put;key=k;value=a b;", {2, "kvs-put", {{"key", "k"}, {"value", "a b"}}}},
        // Keys may repeat (a spawn's segments), in the order sent.
        {"cmd=spawn;ncmds=2;subcmd=./a;maxprocs=1;subcmd=./b;maxprocs=2;",
         {2, "spawn",
          {{"ncmds", "2"}, {"subcmd", "./a"}, {"maxprocs", "1"}, {"subcmd", "./b"}, {"maxprocs", "2"}}}},
        // The final ';' is optional, an empty pair skipped, a pair without '=' a key.
        {"cmd=kvs-get;key=k", {2, "kvs-get", {{"key", "k"}}}},
        {"cmd=kvs-get;;key=k;;;", {2, "kvs-get", {{"key", "k"}}}},
        {"cmd=kvs-fence;flag;key=;", {2, "kvs-fence", {{"flag", ""}, {"key", ""}}}},
        // Only abort's message runs to the end.
        {"cmd=kvs-put;message=a;b;", {2, "kvs-put", {{"message", "a"}, {"b", ""}}}},
    };
    for (const auto& [body, want] : cases) {
        Parser p = pmi2_parser();
        p.feed(frame(body));
        expect_requests(take_all(p), {want}, body);
    }
}

TEST(PmiWireTest, APmi2LengthMayBePaddedWithSpacesOnEitherSide)
{
    const std::string body = "cmd=kvs-fence;";  // 14 bytes
    for (const std::string length : {"    14", "14    ", "  14  ", "000014", " 0014 "}) {
        Parser p = pmi2_parser();
        p.feed(length + body);
        expect_requests(take_all(p), {{2, "kvs-fence", {}}}, length);
    }
}

// A whole session: PMI-1 lines, a spawn block, the switch to PMI-2 and frames.
const std::string session = "cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\n" + spawn_block +
                            "cmd=abort exitcode=2 message=bye now\n";
const std::vector<Expected> session_requests = {
    {1, "init", {{"pmi_version", "1"}, {"pmi_subversion", "1"}}},
    {1, "get_maxes", {}},
    spawn_request,
    {1, "abort", {{"exitcode", "2"}, {"message", "bye now"}}},
};
const std::string pmi2_session = pmi2_init + frame("cmd=fullinit;pmirank=1;") +
                                 frame("cmd=kvs-put;key=k;value=v=1;") + frame("cmd=kvs-fence;") +
                                 frame("cmd=abort;isworldabort=TRUE;message=a; b;");
const std::vector<Expected> pmi2_session_requests = {
    {1, "init", {{"pmi_version", "2"}, {"pmi_subversion", "0"}}},
    {2, "fullinit", {{"pmirank", "1"}}},
    {2, "kvs-put", {{"key", "k"}, {"value", "v=1"}}},
    {2, "kvs-fence", {}},
    {2, "abort", {{"isworldabort", "TRUE"}, {"message", "a; b"}}},
};

TEST(PmiWireTest, SeveralRequestsInOneFeedComeOutOneByOneInOrder)
{
    expect_requests(parse_all(session), session_requests, "PMI-1");
    // The init and the frames after it in one read: the frames are PMI-2.
    expect_requests(parse_all(pmi2_session), pmi2_session_requests, "PMI-2");
}

TEST(PmiWireTest, RequestsFedByteByByteComeOutWhole)
{
    Parser p1;
    expect_requests(parse_byte_by_byte(p1, session), session_requests, "PMI-1");
    Parser p2;
    expect_requests(parse_byte_by_byte(p2, pmi2_session), pmi2_session_requests, "PMI-2");
}

TEST(PmiWireTest, RequestsFedInUnevenPiecesComeOutWhole)
{
    for (std::size_t piece = 2; piece < 20; ++piece) {
        Parser p;
        std::vector<Request> got;
        for (std::size_t at = 0; at < pmi2_session.size(); at += piece) {
            p.feed(std::string_view(pmi2_session).substr(at, piece));
            for (auto& r : take_all(p))
                got.push_back(std::move(r));
        }
        expect_requests(got, pmi2_session_requests, "pieces of " + std::to_string(piece));
    }
}

TEST(PmiWireTest, NextWaitsUntilARequestHasComeWhole)
{
    for (const std::string partial : {"", "cmd=get_maxes", "mcmd=spawn\n", "mcmd=spawn\nnprocs=1\nendcm"}) {
        Parser p;
        p.feed(partial);
        auto r = p.next();
        ASSERT_TRUE(r) << partial << ": " << r.error();
        EXPECT_FALSE(*r) << partial;
    }
    for (const std::string partial : {"", "    1", "    14cmd=kvs-fence"}) {
        Parser p = pmi2_parser();
        p.feed(partial);
        auto r = p.next();
        ASSERT_TRUE(r) << partial << ": " << r.error();
        EXPECT_FALSE(*r) << partial;
    }
}

TEST(PmiWireTest, WhatIsNotAPmi1RequestIsAnError)
{
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"hello\n", "not a PMI request: a PMI-1 line must start with cmd= (got \"hello\")"},
        {"GET / HTTP/1.1\n", "not a PMI request: a PMI-1 line must start with cmd= (got \"GET / HTTP/1.1\")"},
        {"key=v cmd=put\n", "not a PMI request: a PMI-1 line must start with cmd= (got \"key=v cmd=put\")"},
        {"cmdx=put\n", "not a PMI request: a PMI-1 line must start with cmd= (got \"cmdx=put\")"},
        {"cmd\n", "not a PMI request: a PMI-1 line must start with cmd= (got \"cmd\")"},
        {"mcmd=spawnx\n", "not a PMI request: a PMI-1 line must start with cmd= (got \"mcmd=spawnx\")"},
        {"\n", "not a PMI request: an empty line (a PMI-1 line must start with cmd=)"},
        {"   \n", "not a PMI request: an empty line (a PMI-1 line must start with cmd=)"},
        {"cmd=\n", "not a PMI request: cmd= without a command name (got \"cmd=\")"},
        {"cmd= key=v\n", "not a PMI request: cmd= without a command name (got \"cmd= key=v\")"},
        // The bad line after good ones.
        {"cmd=get_maxes\n\n", "not a PMI request: an empty line (a PMI-1 line must start with cmd=)"},
    };
    for (const auto& [input, want] : cases)
        EXPECT_EQ(error_of(input), want) << input;
}

TEST(PmiWireTest, WhatIsNotAPmi2FrameIsAnError)
{
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"abcdefcmd=kvs-fence;",
         "not a PMI-2 request: the first 6 characters must be a decimal length (got \"abcdef\")"},
        {"      cmd=kvs-fence;",
         "not a PMI-2 request: the first 6 characters must be a decimal length (got \"      \")"},
        {"  1 4 cmd=kvs-fence;",
         "not a PMI-2 request: the first 6 characters must be a decimal length (got \"  1 4 \")"},
        {"+14   cmd=kvs-fence;",
         "not a PMI-2 request: the first 6 characters must be a decimal length (got \"+14   \")"},
        {"-00014cmd=kvs-fence;",
         "not a PMI-2 request: the first 6 characters must be a decimal length (got \"-00014\")"},
        {"14\n   cmd=kvs-fence;",
         "not a PMI-2 request: the first 6 characters must be a decimal length (got \"14?   \")"},
        {"     0", "not a PMI-2 request: a length of 0 (got \"     0\")"},
        {"000000cmd=x;", "not a PMI-2 request: a length of 0 (got \"000000\")"},
        {" 65537", "not a PMI-2 request: a length of 65537 is over the 65536 bytes taken"},
        {"999999", "not a PMI-2 request: a length of 999999 is over the 65536 bytes taken"},
        {frame("key=v;cmd=x;"), "not a PMI-2 request: the body must start with cmd= (got \"key=v;cmd=x;\")"},
        {frame(" cmd=x;"), "not a PMI-2 request: the body must start with cmd= (got \" cmd=x;\")"},
        {frame("cmd=;key=v;"), "not a PMI-2 request: cmd= without a command name (got \"cmd=;key=v;\")"},
        {frame("cmd="), "not a PMI-2 request: cmd= without a command name (got \"cmd=\")"},
    };
    for (const auto& [input, want] : cases) {
        Parser p = pmi2_parser();
        EXPECT_EQ(error_of(p, input), want) << input;
    }
}

TEST(PmiWireTest, ErrorsQuoteAtMostFortyCharactersOfTheInput)
{
    const std::string line = "x" + std::string(100, 'y') + "\n";
    EXPECT_EQ(error_of(line), "not a PMI request: a PMI-1 line must start with cmd= (got \"x" + std::string(39, 'y') +
                                  "...\")");
}

TEST(PmiWireTest, ALineLongerThanMaxRequestIsAnError)
{
    const std::string longest = "cmd=put value=" + std::string(max_request - 14, 'v');
    ASSERT_EQ(longest.size(), max_request);
    {
        Parser p;  // max_request bytes: the newline may still come
        p.feed(longest);
        auto r = p.next();
        ASSERT_TRUE(r) << r.error();
        EXPECT_FALSE(*r);
        p.feed("\n");
        const auto got = take_all(p);
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0].get("value")->size(), max_request - 14);
    }
    {
        Parser p;  // one more, and no newline
        p.feed(longest + "v");
        auto r = p.next();
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error().rfind("not a PMI request: a line longer than 65536 bytes (got \"cmd=put value=vv", 0), 0u)
            << r.error();
    }
    // One more with its newline: still too long.
    EXPECT_NE(error_of(longest + "v\n"), "");
    // Not PMI at all, however long: an error as soon as it is too long.
    EXPECT_NE(error_of(std::string(max_request + 1, '\0')), "");
}

TEST(PmiWireTest, ASpawnBlockLongerThanMaxRequestIsAnError)
{
    std::string block = "mcmd=spawn\n";
    while (block.size() <= max_request)
        block += "arg1=" + std::string(1000, 'a') + "\n";
    EXPECT_NE(error_of(block), "");
    EXPECT_NE(error_of(block + "endcmd\n"), "");
}

TEST(PmiWireTest, APmi2FrameWhoseBodyIsStillComingWaitsWithinBounds)
{
    Parser p = pmi2_parser();
    const std::string body = "cmd=kvs-put;key=k;value=" + std::string(max_request - 25, 'v') + ";";
    ASSERT_EQ(body.size(), max_request);
    const std::string bytes = frame(body);
    p.feed(std::string_view(bytes).substr(0, bytes.size() - 1));
    auto r = p.next();
    ASSERT_TRUE(r) << r.error();
    EXPECT_FALSE(*r);
    p.feed(";");
    const auto got = take_all(p);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].get("value")->size(), max_request - 25);
}

TEST(PmiWireTest, RequestGetReturnsTheFirstValueOfAKeyOrNull)
{
    Request r;
    r.args = {{"subcmd", "./a"}, {"maxprocs", "1"}, {"subcmd", "./b"}, {"empty", ""}};
    ASSERT_NE(r.get("subcmd"), nullptr);
    EXPECT_EQ(*r.get("subcmd"), "./a");
    EXPECT_EQ(*r.get("maxprocs"), "1");
    ASSERT_NE(r.get("empty"), nullptr);
    EXPECT_EQ(*r.get("empty"), "");
    EXPECT_EQ(r.get("absent"), nullptr);
    EXPECT_EQ(r.get("subcmd2"), nullptr);
    EXPECT_EQ(r.get(""), nullptr);
}

TEST(PmiWireTest, ReplyWritesPmi1Lines)
{
    const std::vector<std::pair<std::string, std::string>> cases = {
        {reply(1, "get_result", {{"rc", "0"}, {"value", "abc"}}), "cmd=get_result rc=0 value=abc\n"},
        {reply(1, "barrier_out"), "cmd=barrier_out\n"},
        {reply(1, "response_to_init", {{"pmi_version", "1"}, {"pmi_subversion", "1"}, {"rc", "0"}}),
         "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"},
        {reply(1, "maxes", {{"kvsname_max", "256"}, {"keylen_max", "64"}, {"vallen_max", "1024"}}),
         "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"},
        {reply(1, "get_result", {{"rc", "0"}, {"value", "segments=3"}}), "cmd=get_result rc=0 value=segments=3\n"},
        // An empty value is never written: its pair is left out.
        {reply(1, "get_result", {{"rc", "-1"}, {"value", ""}, {"msg", "key_not_found"}}),
         "cmd=get_result rc=-1 msg=key_not_found\n"},
        {reply(1, "finalize_ack", {{"rc", ""}}), "cmd=finalize_ack\n"},
    };
    for (const auto& [got, want] : cases)
        EXPECT_EQ(got, want);
}

TEST(PmiWireTest, ReplyWritesPmi2FramesWithARightJustifiedLength)
{
    const std::vector<std::pair<std::string, std::string>> cases = {
        {reply(2, "kvs-get-response", {{"rc", "0"}, {"found", "TRUE"}, {"value", "v"}}),
         "    45cmd=kvs-get-response;rc=0;found=TRUE;value=v;"},
        {reply(2, "kvs-fence-response", {{"rc", "0"}}), "    28cmd=kvs-fence-response;rc=0;"},
        {reply(2, "finalize-response"), "    22cmd=finalize-response;"},
        // An empty value is never written: its pair is left out.
        {reply(2, "kvs-get-response", {{"rc", "0"}, {"found", "FALSE"}, {"value", ""}}),
         "    38cmd=kvs-get-response;rc=0;found=FALSE;"},
        {reply(2, "x", {{"value", std::string(1000, 'v')}}), "  1013cmd=x;value=" + std::string(1000, 'v') + ";"},
    };
    for (const auto& [got, want] : cases) {
        EXPECT_EQ(got, want);
        EXPECT_EQ(std::stoul(got.substr(0, 6)), got.size() - 6) << got;
    }
}

// A reply the 6-digit length cannot say is the command's failure, never a
// frame whose length a client reads wrong (and then takes the rest of it
// for the next reply).
TEST(PmiWireTest, APmi2ReplyTooLongForItsLengthFieldIsAFailure)
{
    const std::string got = reply(2, "kvs-get-response", {{"rc", "0"}, {"value", std::string(1'000'000, 'v')}, {"thrid", "7"}});
    EXPECT_EQ(got, "    81cmd=kvs-get-response;rc=-1;errmsg=the_reply_is_over_PMI-2's_999999_bytes;thrid=7;");
    EXPECT_EQ(std::stoul(got.substr(0, 6)), got.size() - 6);
    const std::string fits = reply(2, "x", {{"value", std::string(999'999 - 13, 'v')}});
    EXPECT_EQ(fits.substr(0, 6), "999999");
}

// A PMI-2 task may put a value with a line's end in it, a PMI-1 task one
// with ';': read back in the other framing, it would end early and what
// follows pass for more of the reply, or for the next one.
TEST(PmiWireTest, AValueTheFramingCannotCarryIsTheCommandsFailureNeverAnotherReply)
{
    EXPECT_EQ(reply(1, "get_result", {{"rc", "0"}, {"value", "x\ncmd=barrier_out"}}),
              "cmd=get_result rc=-1 msg=a_value_this_framing_cannot_carry\n");
    EXPECT_EQ(reply(1, "get_result", {{"rc", "0"}, {"value", "x rc=7"}}),
              "cmd=get_result rc=-1 msg=a_value_this_framing_cannot_carry\n");
    EXPECT_EQ(reply(2, "kvs-get-response", {{"rc", "0"}, {"value", "a;rc=0"}, {"thrid", "3"}}),
              "    76cmd=kvs-get-response;rc=-1;errmsg=a_value_this_framing_cannot_carry;thrid=3;");
    // What each framing carries goes as it is.
    EXPECT_EQ(reply(2, "kvs-get-response", {{"value", "x y\nz"}}), "    33cmd=kvs-get-response;value=x y\nz;");
    EXPECT_EQ(reply(1, "get_result", {{"value", "a;b"}}), "cmd=get_result value=a;b\n");
}

TEST(PmiWireTest, APmi2ReplyIsAFrameThisParserReadsBack)
{
    const Args args = {{"rc", "0"}, {"jobid", "kvs_42_0"}, {"value", "a=b c"}};
    Parser p = pmi2_parser();
    p.feed(reply(2, "fullinit-response", args));
    expect_requests(take_all(p), {{2, "fullinit-response", args}}, "reply");
}

}  // namespace
}  // namespace exitpolicy::pmix_server::pmi
