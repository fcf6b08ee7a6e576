// The Redis client's pure parts: URL parsing, key slots, CLUSTER SLOTS and
// redirection parsing, and the reply parser on hostile bytes.
#include "kvstore/redis_backend.h"
#include "libkvstore/remote/redis_connection.h"
#include "libkvstore/remote/redis_large_bulk.h"
#include "libkvstore/remote/redis_reply.h"
#include "libkvstore/remote/redis_slots.h"
#include "largest_allocation.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

using Type = RedisReply::Type;
using namespace std::string_view_literals;

TEST(RedisUrl, ParsesEveryPart) {
  ASSERT_OK_AND_ASSIGN(RedisUrl u, ParseRedisUrl("redis://127.0.0.1:6379"));
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "");
  ASSERT_OK_AND_ASSIGN(u, ParseRedisUrl("redis://cache-user:s3cr%3At%40x@redis.internal:7000"));
  EXPECT_EQ(u.host, "redis.internal");
  EXPECT_EQ(u.port, 7000);
  EXPECT_EQ(u.user, "cache-user");
  EXPECT_EQ(u.password, "s3cr:t@x");
  ASSERT_OK_AND_ASSIGN(u, ParseRedisUrl("redis://:pw@[::1]:1"));
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 1);
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "pw");
  // An unencoded '@' in the password: the last '@' ends the credentials.
  ASSERT_OK_AND_ASSIGN(u, ParseRedisUrl("redis://u:p@ss@h:65535"));
  EXPECT_EQ(u.password, "p@ss");
  EXPECT_EQ(u.port, 65535);
}

TEST(RedisUrl, RefusesWhatItDoesNotUnderstand) {
  struct Case {
    const char* url;
    const char* message;
  } cases[] = {
      {"", "must start with redis://"},
      {"http://h:1", "must start with redis://"},
      {"redis:/h:1", "must start with redis://"},
      {"redis://h", "port is missing"},
      {"redis://h:", "port is missing"},
      {"redis://:1", "host is empty"},
      {"redis://h:0", "not a number in 1..65535"},
      {"redis://h:65536", "not a number in 1..65535"},
      {"redis://h:+1", "not a number in 1..65535"},
      {"redis://h:1x", "not a number in 1..65535"},
      {"redis://h:000001", "not a number in 1..65535"},
      {"redis://h:1/0", "path, database or query"},
      {"redis://h:1?x=1", "path, database or query"},
      {"redis://h h:1", "spaces or non-printable"},
      {"redis://h\x01:1", "spaces or non-printable"},
      {"redis://pw@h:1", "USER:PASSWORD"},
      {"redis://u:@h:1", "password is empty"},
      {"redis://u:%zz@h:1", "invalid %-escape"},
      {"redis://u:%4@h:1", "truncated %-escape"},
      {"redis://[::1:1", "not closed"},
      {"redis://[::1]1", "port is missing"},
      {"redis://[evil]:1", "the host in [...] is not an IPv6 address"},
      {"redis://ho$t:1", "the host has a bad character"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseRedisUrl(c.url), HasCode(StatusCode::kInvalidArgument, c.message)) << c.url;
  }
  EXPECT_THAT(ParseRedisUrl("redis://" + std::string(300, 'h') + ":1"),
              HasCode(StatusCode::kInvalidArgument, "longer than 253"));
  EXPECT_THAT(ParseRedisUrl("redis://" + std::string(5000, 'h') + ":1"),
              HasCode(StatusCode::kInvalidArgument, "longer than 4096"));
}

TEST(RedisUrl, SchemeIsCaseInsensitiveAndTlsIsNotSupported) {
  for (const char* url : {"REDIS://h:1", "Redis://u:p@h:1", "rEdIs://[::1]:1"}) {
    EXPECT_OK(ParseRedisUrl(url)) << url;
    EXPECT_TRUE(HasRedisScheme(url)) << url;
  }
  for (const char* url : {"rediss://h:1", "REDISS://u:p@h:1", "Rediss://h"}) {
    EXPECT_THAT(ParseRedisUrl(url), HasCode(StatusCode::kNotSupported, "TLS (rediss://) is not supported")) << url;
    EXPECT_TRUE(HasRedisScheme(url)) << url;
  }
  for (const char* text : {"redis:/h:1", "dir/redis://h:1", "http://h:1", "redis", ""}) {
    EXPECT_FALSE(HasRedisScheme(text)) << text;
  }
}

// A malformed URL may hold its password anywhere (a forgotten '@', a typo
// in the port): no message quotes any part of it.
TEST(RedisUrl, MessagesNeverQuoteTheUrl) {
  for (const std::string url : {"redis://u:SECRET@h", "redis://u:SECRET@h:", "redis://u:SECRET@h:1/0",
                                "redis://u:SECRET:h:1", "redis://u:SECRET:1", "redis://SECRET@h:1",
                                "redis://u:SECRET@ho$t:1", "redis://u:SECRET@[SECRET]:1", "redis://u:p@h:SECRET",
                                "redis://u:%zzSECRET@h:1", "REDISS://u:SECRET@h:1", "http://u:SECRET@h:1",
                                "redis://u:SECRET h:1"}) {
    Result<RedisUrl> parsed = ParseRedisUrl(url);
    ASSERT_FALSE(parsed.ok()) << url;
    EXPECT_EQ(parsed.status().message().find("SECRET"), std::string_view::npos) << parsed.status().ToString();
  }
}

TEST(RedisUrl, RedactCredentialsInText) {
  EXPECT_EQ(RedactCredentials("ls 'redis://u:pw@h:1' failed"), "ls 'redis://u:***@h:1' failed");
  EXPECT_EQ(RedactCredentials("REDIS://:pw@h:1 and rediss://u:p@ss@[::1]:2/x"),
            "REDIS://:***@h:1 and rediss://u:***@[::1]:2/x");
  EXPECT_EQ(RedactCredentials("redis://justapassword@h:1"), "redis://***@h:1");
  EXPECT_EQ(RedactCredentials("redis://h:1, file:///a@b, no url@all"), "redis://h:1, file:///a@b, no url@all");
  EXPECT_EQ(RedactCredentials("x://u:pw@"), "x://u:***@");
  EXPECT_EQ(RedactCredentials(""), "");
}

TEST(RedisUrl, NodeNamesBracketIpv6) {
  EXPECT_EQ(RedisNodeName("127.0.0.1", 6379), "127.0.0.1:6379");
  EXPECT_EQ(RedisNodeName("::1", 6379), "[::1]:6379");
  EXPECT_EQ(RedisNodeName("redis.internal", 1), "redis.internal:1");
}

TEST(RedisUrl, RedactsThePassword) {
  ASSERT_OK_AND_ASSIGN(RedisUrl u, ParseRedisUrl("redis://u:secret@[::1]:7"));
  EXPECT_EQ(RedactedRedisUrl(u), "redis://u:***@[::1]:7");
  ASSERT_OK_AND_ASSIGN(u, ParseRedisUrl("redis://h:7"));
  EXPECT_EQ(RedactedRedisUrl(u), "redis://h:7");
  ASSERT_OK_AND_ASSIGN(u, ParseRedisUrl("redis://a%25b%40:pw@h:7"));
  EXPECT_EQ(u.user, "a%b@");
  EXPECT_EQ(RedactedRedisUrl(u), "redis://a%25b%40:***@h:7");  // parses back
}

// Found by fuzz_redis_url: a long user of characters that %-encode to 3 bytes
// made a redacted URL longer than the parser accepts.
TEST(RedisUrl, LongCredentialsAreRefusedSoTheRedactedFormParses) {
  ASSERT_OK_AND_ASSIGN(RedisUrl u, ParseRedisUrl("redis://" + std::string(1024, '!') + ":p@h:7"));
  ASSERT_OK_AND_ASSIGN(RedisUrl again, ParseRedisUrl(RedactedRedisUrl(u)));
  EXPECT_EQ(again.user, u.user);
  EXPECT_THAT(ParseRedisUrl("redis://" + std::string(2000, '!') + ":p@h:7"),
              HasCode(StatusCode::kInvalidArgument, "longer than 1024"));
  EXPECT_THAT(ParseRedisUrl("redis://u:" + std::string(1025, 'p') + "@h:7"),
              HasCode(StatusCode::kInvalidArgument, "longer than 1024"));
}

TEST(RedisSlots, Crc16AndHashTagsMatchRedis) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  // Values from CLUSTER KEYSLOT on Redis 7.0.
  EXPECT_EQ(KeyHashSlot("foo"), 12182);
  EXPECT_EQ(KeyHashSlot("bar"), 5061);
  EXPECT_EQ(KeyHashSlot("{user1000}.following"), 3443);
  EXPECT_EQ(KeyHashSlot("foo{}{bar}"), 8363);
  EXPECT_EQ(KeyHashSlot("foo{{bar}}zap"), 4015);
  EXPECT_EQ(KeyHashSlot("{user1000}.following"), KeyHashSlot("user1000"));
  EXPECT_EQ(KeyHashSlot("{user1000}.followers"), KeyHashSlot("{user1000}.following"));
  EXPECT_EQ(KeyHashSlot("foo{}{bar}"), Crc16("foo{}{bar}") % 16384);  // empty tag: whole key
  EXPECT_EQ(KeyHashSlot("foo{{bar}}zap"), KeyHashSlot("{bar"));
  EXPECT_EQ(KeyHashSlot("foo{bar}{zap}"), KeyHashSlot("bar"));
  EXPECT_EQ(KeyHashSlot(""), 0);
}

RedisReply Int(int64_t v) {
  RedisReply r;
  r.type = Type::kInteger;
  r.integer = v;
  return r;
}
RedisReply Str(std::string s, Type type = Type::kString) {
  RedisReply r;
  r.type = type;
  r.str = std::move(s);
  return r;
}
RedisReply Err(std::string s) { return Str(std::move(s), Type::kError); }
RedisReply Arr(std::vector<RedisReply> e) {
  RedisReply r;
  r.type = Type::kArray;
  r.elements = std::move(e);
  return r;
}
RedisReply Range(int64_t first, int64_t last, std::string host, int64_t port) {
  return Arr({Int(first), Int(last), Arr({Str(std::move(host)), Int(port), Str("id")})});
}

TEST(RedisSlots, ParsesClusterSlots) {
  RedisReply reply = Arr({Range(0, 5460, "10.0.0.1", 7000), Range(5461, 16383, "", 7001),
                          Range(100, 100, "?", 7002)});
  ASSERT_OK_AND_ASSIGN(auto ranges, ParseClusterSlots(reply, "seed"));
  ASSERT_EQ(ranges.size(), 2u);  // the "?" master is left out
  EXPECT_EQ(ranges[0].first, 0);
  EXPECT_EQ(ranges[0].last, 5460);
  EXPECT_EQ(ranges[0].host, "10.0.0.1");
  EXPECT_EQ(ranges[1].host, "seed");  // empty host: the node asked
  EXPECT_EQ(ranges[1].port, 7001);
}

TEST(RedisSlots, RefusesHostileClusterSlots) {
  struct Case {
    RedisReply reply;
    const char* message;
  } cases[] = {
      {Str("x"), "not an array"},
      {Arr({Str("x")}), "CLUSTER SLOTS[0]: not [first, last, master"},
      {Arr({Arr({Int(0), Int(1)})}), "not [first, last, master"},
      {Arr({Arr({Str("0"), Int(1), Arr({Str("h"), Int(1)})})}), "not integers"},
      {Arr({Range(9000, 8000, "h", 1)}), "9000..8000"},
      {Arr({Range(-1, 5, "h", 1)}), "not within 0..16383"},
      {Arr({Range(0, 16384, "h", 1)}), "not within 0..16383"},
      {Arr({Range(0, 1, "h", 0)}), "port 0"},
      {Arr({Range(0, 1, "h", 70000)}), "port 70000"},
      {Arr({Range(0, 1, "h;rm -rf", 1)}), "not a host name"},
      {Arr({Range(0, 1, std::string(300, 'h'), 1)}), "not a host name"},
      {Arr({Arr({Int(0), Int(1), Arr({Int(1), Int(1)})})}), "master is not [host, port"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseClusterSlots(c.reply, "seed"), HasCode(StatusCode::kCorruption, c.message))
        << c.message;
  }
}

TEST(RedisSlots, ParsesRedirectionsAndNothingElse) {
  RedisReply moved = Err("MOVED 3999 127.0.0.1:6381");
  auto r = ParseRedirect(moved, "seed");
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ask);
  EXPECT_EQ(r->slot, 3999);
  EXPECT_EQ(r->host, "127.0.0.1");
  EXPECT_EQ(r->port, 6381);
  r = ParseRedirect(Err("ASK 1 :7000"), "seed");
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->ask);
  EXPECT_EQ(r->host, "seed");
  r = ParseRedirect(Err("ASK 1 ::1:7000"), "seed");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->host, "::1");
  for (const char* bad : {"MOVED", "MOVED 1", "MOVED x h:1", "MOVED 16384 h:1", "MOVED -1 h:1",
                          "MOVED 1 h:0", "MOVED 1 h:99999", "MOVED 1 h", "MOVED 1 h/x:1",
                          "MOVEDX 1 h:1", "ERR MOVED 1 h:1"}) {
    EXPECT_FALSE(ParseRedirect(Err(bad), "s").has_value()) << bad;
  }
  EXPECT_FALSE(ParseRedirect(Str("MOVED 1 h:1"), "s").has_value());  // a value, not an error
}

TEST(RedisReplies, ParsesEveryType) {
  ASSERT_OK_AND_ASSIGN(auto replies,
                       ParseRedisReplies("+OK\r\n-ERR bad\r\n:-42\r\n$-1\r\n$0\r\n\r\n$5\r\na\r\nb\0\r\n"
                                         "*2\r\n*1\r\n$1\r\nx\r\n:7\r\n*-1\r\n*0\r\n"sv,
                                         1 << 20));
  ASSERT_EQ(replies.size(), 9u);
  EXPECT_EQ(replies[0].type, Type::kStatus);
  EXPECT_EQ(replies[0].str, "OK");
  EXPECT_EQ(replies[1].error_code(), "ERR");
  EXPECT_EQ(replies[2].integer, -42);
  EXPECT_EQ(replies[3].type, Type::kNil);
  EXPECT_EQ(replies[4].type, Type::kString);
  EXPECT_EQ(replies[4].str, "");
  EXPECT_EQ(replies[5].str, std::string("a\r\nb\0", 5));
  ASSERT_EQ(replies[6].elements.size(), 2u);
  EXPECT_EQ(replies[6].elements[0].elements[0].str, "x");
  EXPECT_EQ(replies[6].elements[1].integer, 7);
  EXPECT_EQ(replies[7].type, Type::kNil);
  EXPECT_EQ(replies[8].type, Type::kArray);
  EXPECT_TRUE(replies[8].elements.empty());
}

TEST(RedisReplies, LargeBulkStringsBetweenOtherReplies) {
  std::string big(100000, 'b'), exact(RedisLargeBulk::kMinBytes, 'e');
  std::string bytes = ":1\r\n$100000\r\n" + big + "\r\n$" + std::to_string(exact.size()) + "\r\n" +
                      exact + "\r\n*1\r\n$100000\r\n" + big + "\r\n$-1\r\n";
  ASSERT_OK_AND_ASSIGN(auto replies, ParseRedisReplies(bytes, 1 << 20));
  ASSERT_EQ(replies.size(), 5u);
  EXPECT_EQ(replies[0].integer, 1);
  EXPECT_EQ(replies[1].type, Type::kString);
  EXPECT_TRUE(replies[1].str == big);
  EXPECT_TRUE(replies[2].str == exact);
  EXPECT_TRUE(replies[3].elements[0].str == big);  // nested: parsed by hiredis
  EXPECT_EQ(replies[4].type, Type::kNil);
}

// A length or a count is only a claim: memory follows the bytes that
// arrive, so a header alone costs next to nothing.
TEST(RedisReplies, HeadersAloneAllocateLittle) {
  constexpr size_t kLimit = size_t{600} << 20;
  std::string many_integers;
  for (int i = 0; i < 1000; ++i) many_integers += ":1\r\n";
  struct Case {
    std::string bytes;
    size_t max_allocation;
  } cases[] = {
      {"$629145599\r\n", 2 * RedisLargeBulk::kFirstBytes},
      {"$629145599\r\n" + std::string(3 << 20, 'x'), 2 * (size_t{3} << 20)},
      {"*1048575\r\n", 1 << 20},
      {"*1048575\r\n" + many_integers, 1 << 20},
      {"*1048575\r\n*1048575\r\n", 1 << 20},
  };
  for (const Case& c : cases) {
    LargestAllocation largest;
    EXPECT_THAT(ParseRedisReplies(c.bytes, kLimit), HasCode(StatusCode::kIOError, "end inside a reply"))
        << c.bytes.substr(0, 20);
    EXPECT_LE(largest.bytes(), c.max_allocation) << c.bytes.substr(0, 20);
  }
}

// Values and arrays that outgrow their first buffers arrive whole.
TEST(RedisReplies, BuffersGrowAsBytesArrive) {
  std::string big(5 * RedisLargeBulk::kFirstBytes + 7, 'v');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  std::string bytes(1, '$');  // appends only: "$" + std::string trips GCC 12's -Wrestrict at -O3
  bytes += std::to_string(big.size()) + "\r\n" + big + "\r\n*3000\r\n";
  for (int i = 0; i < 3000; ++i) bytes += "*2\r\n:" + std::to_string(i) + "\r\n$1\r\nx\r\n";
  ASSERT_OK_AND_ASSIGN(auto replies, ParseRedisReplies(bytes, 64 << 20));
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_TRUE(replies[0].str == big);
  ASSERT_EQ(replies[1].elements.size(), 3000u);
  for (int i = 0; i < 3000; ++i) {
    const RedisReply& e = replies[1].elements[static_cast<size_t>(i)];
    ASSERT_EQ(e.elements.size(), 2u);
    EXPECT_EQ(e.elements[0].integer, i);
    EXPECT_EQ(e.elements[1].str, "x");
  }
}

TEST(RedisReplies, RefusesHostileBytes) {
  struct Case {
    std::string bytes;
    const char* message;
  } cases[] = {
      {"hello\r\n", "protocol error"},
      {"$-2\r\n", "protocol error"},
      {"$abc\r\n", "protocol error"},
      {"$99999999999999999999\r\n", "protocol error"},
      {"*-2\r\n", "protocol error"},
      {"*99999999999\r\n", "protocol error"},
      {"*2000000\r\n", "more than 1048576 elements"},
      {"*600000\r\n*600000\r\n", "end inside a reply"},  // headers count nothing
      {"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "nested"},
      {"$100\r\nshort", "end inside a reply"},
      {"*3\r\n:1\r\n", "end inside a reply"},
      {":12", "end inside a reply"},
      {"$2000000\r\n" + std::string(1100000, 'x'), "reply larger than 1048576 bytes"},
      {"$1048577\r\n", "reply larger than 1048576 bytes"},
      {"$70000\r\n" + std::string(70000, 'x') + "\n\r", "not followed by CRLF"},
      {"$70000\r\n" + std::string(69999, 'x'), "end inside a reply"},
      {"*1\r\n$2000000\r\n" + std::string(1100000, 'x'), "reply larger than 1048576 bytes"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseRedisReplies(c.bytes, 1 << 20), HasCode(StatusCode::kIOError, c.message))
        << c.bytes.substr(0, 40);
  }
}

TEST(RedisReplies, ErrorRepliesMapToCodes) {
  EXPECT_THAT(ErrorReplyStatus("h:1", "GET 'k'", "NOPERM this user has no permissions"),
              HasCode(StatusCode::kPermissionDenied, "redis h:1: GET 'k': NOPERM"));
  EXPECT_THAT(ErrorReplyStatus("h:1", "AUTH u", "WRONGPASS invalid username-password pair"),
              HasCode(StatusCode::kPermissionDenied, "WRONGPASS"));
  EXPECT_THAT(ErrorReplyStatus("h:1", "GET 'k'", "NOAUTH Authentication required."),
              HasCode(StatusCode::kPermissionDenied, "NOAUTH"));
  EXPECT_THAT(ErrorReplyStatus("h:1", "GET 'k'", "WRONGTYPE Operation against a key holding the wrong kind of value"),
              HasCode(StatusCode::kFailedPrecondition, "WRONGTYPE"));
  EXPECT_THAT(ErrorReplyStatus("h:1", "SET", "OOM command not allowed"),
              HasCode(StatusCode::kResourceExhausted, "OOM"));
  EXPECT_THAT(ErrorReplyStatus("h:1", "GET", "CLUSTERDOWN The cluster is down"),
              HasCode(StatusCode::kIOError, "CLUSTERDOWN"));
  // Server text is clipped and made printable.
  Status s = ErrorReplyStatus("h:1", "GET", "ERR \x01\n" + std::string(500, 'x'));
  EXPECT_EQ(s.message().find('\n'), std::string_view::npos);
  EXPECT_LT(s.message().size(), 300u);
}

}  // namespace
}  // namespace kvstore::testing
