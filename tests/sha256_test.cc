#include "libkvstore/integrity/sha256.h"

#include <string>

#include "kvstore/array.h"
#include "testutil.h"

namespace kvstore {
namespace {

TEST(Sha256Test, NistVectors) {
  EXPECT_EQ(Sha256(std::string_view("")).ToHex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256(std::string_view("abc")).ToHex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
                .ToHex(),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, IncrementalMillionAAndReuseAfterFinish) {
  Sha256Hasher h;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.Update(chunk);
  EXPECT_EQ(h.Finish().ToHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  h.Update(std::string_view("abc"));  // Finish reset the hasher
  EXPECT_EQ(h.Finish(), Sha256(std::string_view("abc")));
}

TEST(Sha256Test, HexRoundTripAndRejects) {
  const Sha256Digest d = Sha256(std::string_view("abc"));
  EXPECT_EQ(Sha256Digest::FromHex(d.ToHex()), d);
  std::string upper = d.ToHex();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  EXPECT_EQ(Sha256Digest::FromHex(upper), d);
  EXPECT_FALSE(Sha256Digest::FromHex(d.ToHex().substr(1)).has_value());
  EXPECT_FALSE(Sha256Digest::FromHex(d.ToHex() + "0").has_value());
  std::string bad = d.ToHex();
  bad[10] = 'g';
  EXPECT_FALSE(Sha256Digest::FromHex(bad).has_value());
  EXPECT_NE(Sha256Digest(), d);
}

TEST(Sha256Test, ArrayDigestCoversLogicalElementsWhateverTheStrides) {
  Array a = testing::RandomArray(DType::kF16, {2, 3, 8, 4}, 7);
  Array view = a.Slice(2, 2, 6);
  EXPECT_FALSE(view.is_contiguous());
  EXPECT_EQ(Sha256(view), Sha256(view.Clone()));
  const std::vector<std::byte> bytes = view.ToBytes();
  EXPECT_EQ(Sha256(view), Sha256(std::span<const std::byte>(bytes)));
  EXPECT_EQ(Sha256(a.Slice(0, 1, 1)).ToHex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, HmacRfc4231Vectors) {
  const std::string key1(20, '\x0b');
  EXPECT_EQ(HmacSha256(key1, {"Hi There"}).ToHex(),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Parts are concatenated: the split does not matter.
  EXPECT_EQ(HmacSha256("Jefe", {"what do ya want ", "", "for nothing?"}).ToHex(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  const std::string long_key(131, '\xaa');  // longer than a block: hashed first
  EXPECT_EQ(HmacSha256(long_key, {"Test Using Larger Than Block-Size Key - Hash Key First"}).ToHex(),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(HmacSha256("", {}).ToHex(), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(Sha256Test, ConstantTimeEqualComparesEveryByte) {
  const Sha256Digest a = Sha256(std::string_view("a"));
  std::array<uint8_t, Sha256Digest::kSize> last = a.bytes();
  last.back() ^= 1;
  EXPECT_TRUE(ConstantTimeEqual(a, Sha256(std::string_view("a"))));
  EXPECT_FALSE(ConstantTimeEqual(a, Sha256Digest(last)));
  EXPECT_FALSE(ConstantTimeEqual(a, Sha256Digest()));
}

}  // namespace
}  // namespace kvstore
