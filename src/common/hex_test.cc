#include "common/hex.h"

#include <string>

#include <gtest/gtest.h>

namespace llmtap {
namespace {

TEST(Hex, FixedWidthKeepsTheLowDigitsZeroPadded) {
  std::string out = "x";
  AppendHex(&out, 0xabc, 4);
  AppendHex(&out, 0x12345, 2);
  AppendHex(&out, 0xff, 40);  // at most 16
  EXPECT_EQ(out,
            "x0abc45"
            "00000000000000ff");
  EXPECT_EQ(Hex64(0x0123456789abcdefULL), "0123456789abcdef");
  EXPECT_EQ(Hex64(0), "0000000000000000");
}

TEST(Hex, MinimalHasNoLeadingZeros) {
  std::string out;
  for (uint64_t v : {uint64_t{0}, uint64_t{9}, uint64_t{0x10}, uint64_t{0x1f00}, ~uint64_t{0}}) {
    AppendHexMinimal(&out, v);
    out += ' ';
  }
  EXPECT_EQ(out, "0 9 10 1f00 ffffffffffffffff ");
}

TEST(Hex, BytesTwoDigitsEach) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa0, 0xff};
  std::string out;
  AppendHexBytes(&out, bytes, sizeof(bytes));
  EXPECT_EQ(out, "000fa0ff");
}

}  // namespace
}  // namespace llmtap
