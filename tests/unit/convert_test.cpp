// SPDX-License-Identifier: Apache-2.0
// convert_test.cpp - PMIx <-> wire (pmix_server/convert.hpp), and the
// events a task's end becomes (pmix_server/pmix_host.hpp), with the real
// PMIx library (initialised by upcalls_test.cpp's environment).
#include "convert.hpp"
#include "pmix_host.hpp"

#include <gtest/gtest.h>

#include <pmix.h>

#include <cstring>
#include <string>
#include <vector>

namespace exitpolicy::pmix_server {
namespace {

TEST(Convert, RanksOfAWildcardAreEveryone)
{
    pmix_proc_t procs[3];
    PMIX_PROC_LOAD(&procs[0], "ns", 4);
    PMIX_PROC_LOAD(&procs[1], "ns", 2);
    PMIX_PROC_LOAD(&procs[2], "ns", PMIX_RANK_WILDCARD);
    EXPECT_EQ(ranks_of(procs, 2), (std::vector<std::uint32_t>{4, 2}));
    EXPECT_TRUE(ranks_of(procs, 3).empty());
    EXPECT_TRUE(ranks_of(nullptr, 0).empty());
}

TEST(Convert, DirectivesAreReadByTheirTypes)
{
    pmix_info_t info[3];
    int timeout = 7;
    PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &timeout, PMIX_INT);
    int wait_all = 0;
    PMIX_INFO_LOAD(&info[1], PMIX_WAIT, &wait_all, PMIX_INT);
    PMIX_INFO_LOAD(&info[2], "user.key", "v", PMIX_STRING);
    EXPECT_EQ(timeout_of(info, 3), 7);
    EXPECT_TRUE(wait_of(info, 3));  // an int 0 means: wait for every key
    EXPECT_EQ(timeout_of(info + 1, 2), 0);
    EXPECT_FALSE(wait_of(info + 2, 1));
    bool no = false;
    PMIX_INFO_DESTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[1], PMIX_WAIT, &no, PMIX_BOOL);
    EXPECT_FALSE(wait_of(info, 3));
    EXPECT_TRUE(is_directive(info[0].key));
    EXPECT_FALSE(is_directive(info[2].key));
    for (auto& i : info)
        PMIX_INFO_DESTRUCT(&i);
}

TEST(Convert, KeysOfANullTerminatedList)
{
    char a[] = "a", b[] = "b";
    char* keys[] = {a, b, nullptr};
    EXPECT_EQ(keys_of(keys), (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(keys_of(nullptr).empty());
}

TEST(Convert, OneInfoRoundTrips)
{
    pmix_info_t in;
    PMIX_INFO_LOAD(&in, "app.key", "hello", PMIX_STRING);
    auto packed = pack_info(in);
    ASSERT_TRUE(packed) << packed.error();
    pmix_info_t out;
    PMIX_INFO_CONSTRUCT(&out);
    ASSERT_TRUE(unpack_info(*packed, out));
    EXPECT_STREQ(out.key, "app.key");
    ASSERT_EQ(out.value.type, PMIX_STRING);
    EXPECT_STREQ(out.value.data.string, "hello");
    PMIX_INFO_DESTRUCT(&in);
    PMIX_INFO_DESTRUCT(&out);
}

TEST(Convert, BytesThatAreNotAnInfoDoNotUnpack)
{
    pmix_info_t out;
    PMIX_INFO_CONSTRUCT(&out);
    EXPECT_FALSE(unpack_info(protocol::Bytes{0xff, 0x01, 0x02}, out));
    EXPECT_FALSE(unpack_info(protocol::Bytes{}, out));
    PMIX_INFO_DESTRUCT(&out);
}

TEST(Convert, InfoArraysRoundTrip)
{
    InfoArray in(3);
    int code = 139;
    PMIX_INFO_LOAD(&in.info[0], PMIX_EXIT_CODE, &code, PMIX_INT);
    PMIX_INFO_LOAD(&in.info[1], PMIX_HOSTNAME, "node3", PMIX_STRING);
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, "exitpolicy.1.0", 5);
    PMIX_INFO_LOAD(&in.info[2], PMIX_EVENT_AFFECTED_PROC, &proc, PMIX_PROC);
    auto packed = pack_infos(in.info, in.n);
    ASSERT_TRUE(packed) << packed.error();
    auto out = unpack_infos(*packed);
    ASSERT_TRUE(out) << out.error();
    ASSERT_EQ((*out)->n, 3u);
    EXPECT_EQ((*out)->info[0].value.data.integer, 139);
    EXPECT_STREQ((*out)->info[1].value.data.string, "node3");
    EXPECT_EQ((*out)->info[2].value.data.proc->rank, 5u);
    EXPECT_STREQ((*out)->info[2].value.data.proc->nspace, "exitpolicy.1.0");

    auto empty = pack_infos(nullptr, 0);
    ASSERT_TRUE(empty);
    auto none = unpack_infos(*empty);
    ASSERT_TRUE(none) << none.error();
    EXPECT_EQ((*none)->n, 0u);
}

TEST(Convert, BadInfoArraysAreErrorsNotCrashes)
{
    EXPECT_FALSE(unpack_infos(protocol::Bytes{}));
    // A count beyond the bound, and a count without its infos, packed as
    // the library packs them.
    auto count_only = [](std::int32_t n) {
        pmix_data_buffer_t buf;
        PMIX_DATA_BUFFER_CONSTRUCT(&buf);
        EXPECT_EQ(PMIx_Data_pack(nullptr, &buf, &n, 1, PMIX_INT32), PMIX_SUCCESS);
        pmix_byte_object_t bytes;
        EXPECT_EQ(PMIx_Data_unload(&buf, &bytes), PMIX_SUCCESS);
        protocol::Bytes out(bytes.bytes, bytes.bytes + bytes.size);
        PMIX_BYTE_OBJECT_DESTRUCT(&bytes);
        PMIX_DATA_BUFFER_DESTRUCT(&buf);
        return out;
    };
    auto big = unpack_infos(count_only(max_infos + 1));
    ASSERT_FALSE(big);
    EXPECT_NE(big.error().find("out of range"), std::string::npos);
    EXPECT_FALSE(unpack_infos(count_only(-1)));
    auto missing = unpack_infos(count_only(3));
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().find("do not unpack"), std::string::npos);
}

TEST(Convert, ALookupReplyBecomesPdataAndSkipsWhatDoesNotUnpack)
{
    protocol::DataReply reply;
    pmix_info_t v;
    PMIX_INFO_LOAD(&v, "k1", "one", PMIX_STRING);
    reply.keys = {"k1", "k2"};
    reply.ranks = {3, 4};
    reply.values = {*pack_info(v), protocol::Bytes{9, 9}};
    PMIX_INFO_DESTRUCT(&v);
    auto pdata = to_pdata(reply, "exitpolicy.1.0");
    ASSERT_EQ(pdata->n, 1u);
    EXPECT_STREQ(pdata->data[0].key, "k1");
    EXPECT_EQ(pdata->data[0].proc.rank, 3u);
    EXPECT_STREQ(pdata->data[0].proc.nspace, "exitpolicy.1.0");
    EXPECT_STREQ(pdata->data[0].value.data.string, "one");
}


// What a handler reads of a termination event: each info by its key.
const pmix_info_t* find(const PmixEvent& e, const char* key)
{
    for (std::size_t i = 0; i < e.info->n; ++i)
        if (PMIX_CHECK_KEY(&e.info->info[i], key))
            return &e.info->info[i];
    return nullptr;
}

TEST(TerminationEvents, ADefaultHandlerHearsOnceAndTheOthersOnlyByTheirCodes)
{
    struct Case {
        int code;
        std::vector<int> statuses;
    };
    const Case cases[] = {
        {PMIX_ERR_PROC_ABORTED_BY_SIG, {PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_EVENT_PROC_TERMINATED, PMIX_ERR_PROC_ABORTED}},
        {PMIX_ERR_PROC_TERM_WO_SYNC, {PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_EVENT_PROC_TERMINATED, PMIX_ERR_PROC_ABORTED}},
        {PMIX_ERR_EXIT_NONZERO_TERM, {PMIX_ERR_EXIT_NONZERO_TERM, PMIX_EVENT_PROC_TERMINATED, PMIX_ERR_PROC_ABORTED}},
        {PMIX_ERR_PROC_REQUESTED_ABORT,
         {PMIX_ERR_PROC_REQUESTED_ABORT, PMIX_EVENT_PROC_TERMINATED, PMIX_ERR_PROC_ABORTED}},
        {PMIX_ERR_PROC_ABORTED, {PMIX_ERR_PROC_ABORTED, PMIX_EVENT_PROC_TERMINATED}},  // never twice
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(PMIx_Error_string(c.code));
        const auto events = termination_events("step.ns", 5, c.code, 139);
        std::vector<int> statuses;
        for (const auto& e : events)
            statuses.push_back(e.status);
        EXPECT_EQ(statuses, c.statuses);
        for (std::size_t k = 0; k < events.size(); ++k) {
            const PmixEvent& e = events[k];
            SCOPED_TRACE(PMIx_Error_string(e.status));
            // Open MPI 5.0's ULFM takes every PMIX_PROC info as a failed
            // process: the one of that type is the affected process.
            std::size_t procs = 0;
            for (std::size_t i = 0; i < e.info->n; ++i)
                procs += e.info->info[i].value.type == PMIX_PROC;
            EXPECT_EQ(procs, 1u);
            const pmix_info_t* affected = find(e, PMIX_EVENT_AFFECTED_PROC);
            ASSERT_NE(affected, nullptr);
            ASSERT_EQ(affected->value.type, PMIX_PROC);
            EXPECT_STREQ(affected->value.data.proc->nspace, "step.ns");
            EXPECT_EQ(affected->value.data.proc->rank, 5u);
            const pmix_info_t* exit_code = find(e, PMIX_EXIT_CODE);
            ASSERT_NE(exit_code, nullptr);
            ASSERT_EQ(exit_code->value.type, PMIX_INT);
            EXPECT_EQ(exit_code->value.data.integer, 139);
            const pmix_info_t* term = find(e, PMIX_PROC_TERM_STATUS);
            ASSERT_NE(term, nullptr);
            ASSERT_EQ(term->value.type, PMIX_STATUS);
            EXPECT_EQ(term->value.data.status, c.code);
            // The first for every default handler; the others for their own.
            const pmix_info_t* non_default = find(e, PMIX_EVENT_NON_DEFAULT);
            if (k == 0) {
                EXPECT_EQ(non_default, nullptr);
                EXPECT_EQ(e.info->n, 3u);
            } else {
                ASSERT_NE(non_default, nullptr);
                ASSERT_EQ(non_default->value.type, PMIX_BOOL);
                EXPECT_TRUE(non_default->value.data.flag);
                EXPECT_EQ(e.info->n, 4u);
            }
        }
    }
}

}  // namespace
}  // namespace exitpolicy::pmix_server
