// Unicode's NFC quick check (UAX #15, "Detecting Normalization Forms"): a
// text is NFC when every char has NFC_Quick_Check = Yes and the canonical
// combining classes of its marks never fall between two starters. Most text
// passes (ASCII, CJK, Latin with precomposed accents) and skips
// normalization; a text with a Maybe or No char, or marks out of order, goes
// through NFC (nfc_append), which may still leave it as it is.
//
// The property comes from utf8proc, the library that normalizes: No where
// NFC changes the char alone (a composition exclusion, a singleton), Maybe
// where the char is the last of the canonical decomposition of a char NFC
// keeps (it may compose with what precedes it). tests/unit/test_nfc_check.cpp
// checks the table against ICU's UCHAR_NFC_QUICK_CHECK on every code point.
//
// Invalid UTF-8 (a byte that starts no well-formed char) is a char of its
// own with class 0 that NFC leaves as it is (unicode.hpp).
//
// The data is Unicode 15.0 throughout; HF's normalizer knows Unicode 9.0
// (nfc_unknown, unicode.hpp), to which a char assigned since is a Yes
// starter. A text that passes here passes there too, and NFC leaves it as it
// is either way; a newer mark can only send a text to nfc_append, which
// follows HF.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/hf/code_point_table.hpp"

namespace tokfeed::text::hf {

class NfcCheckTable {
 public:
  static constexpr uint8_t kNotYes = 0xFF;  // NFC_Quick_Check = No or Maybe

  NfcCheckTable();
  // 0 for a char with NFC_Quick_Check = Yes and combining class 0; its
  // combining class (1-254) for a Yes char with one; kNotYes otherwise.
  uint8_t get(char32_t cp) const { return table_.get(cp); }
  // All 64 two-byte chars with this lead byte (0xC0-0xDF) are 0 above.
  bool block2_yes(unsigned char lead) const { return block2_ >> (lead & 0x1F) & 1; }
  // All 64 three-byte chars with this lead (0xE0-0xEF) and second byte are 0.
  bool block3_yes(unsigned char lead, unsigned char second) const {
    return block3_[lead & 0x0F] >> (second & 0x3F) & 1;
  }
  // Lead bytes of three-byte chars that are all 0 (most of CJK), as two
  // ranges [lo, lo + count) for a vector compare; count 0 for none.
  struct LeadRange {
    uint8_t lo = 0, count = 0;
  };
  LeadRange lead_range(int k) const { return lead_ranges_[k]; }

 private:
  CodePointTable table_;
  uint32_t block2_ = 0;
  uint64_t block3_[16] = {};
  LeadRange lead_ranges_[2];
};

const NfcCheckTable& nfc_check_table();

// True when the quick check answers Yes: NFC(s) == s. False when it answers
// No or Maybe.
bool nfc_quick_check(std::string_view s);

}  // namespace tokfeed::text::hf
