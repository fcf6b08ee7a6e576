// The hand-written JSON parser that Json::Parse used before it moved to
// nlohmann's SAX interface, kept only as the oracle of fuzz_json_diff.
#include "tests/fuzz/json_legacy.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <unordered_set>

namespace kvstore::legacy {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when invalid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

class Parser {
 public:
  Parser(std::string_view text, const Json::ParseOptions& options)
      : text_(text), options_(options) {}

  Result<Json> ParseDocument() {
    SkipSpace();
    Json value;
    KV_RETURN_IF_ERROR(ParseValue(value, 0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected data after the JSON value");
    return value;
  }

 private:
  Status Error(std::string_view what) const {
    return Status::Corruption("JSON: " + std::string(what) + " at byte " + std::to_string(pos_));
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status ParseValue(Json& out, size_t depth) {
    if (pos_ >= text_.size()) return Error("unexpected end of input");
    switch (text_[pos_]) {
      case '{': return ParseObject(out, depth + 1);
      case '[': return ParseArray(out, depth + 1);
      case '"': {
        std::string s;
        KV_RETURN_IF_ERROR(ParseString(s));
        out = Json(std::move(s));
        return Status::OK();
      }
      case 't':
        if (Consume("true")) { out = Json(true); return Status::OK(); }
        return Error("invalid literal");
      case 'f':
        if (Consume("false")) { out = Json(false); return Status::OK(); }
        return Error("invalid literal");
      case 'n':
        if (Consume("null")) { out = Json(nullptr); return Status::OK(); }
        return Error("invalid literal");
      default: return ParseNumber(out);
    }
  }

  Status ParseObject(Json& out, size_t depth) {
    if (depth > options_.max_depth) return Error("nesting deeper than the limit");
    ++pos_;  // '{'
    Json::Object members;
    std::unordered_set<std::string> seen;  // duplicate check in O(1) per key
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      out = Json(std::move(members));
      return Status::OK();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a string key");
      const size_t key_pos = pos_;
      std::string key;
      KV_RETURN_IF_ERROR(ParseString(key));
      if (options_.reject_duplicate_keys && !seen.insert(key).second) {
        pos_ = key_pos;
        return Error("duplicate key \"" + key + "\"");
      }
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      SkipSpace();
      Json value;
      KV_RETURN_IF_ERROR(ParseValue(value, depth));
      members.emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated object");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        out = Json(std::move(members));
        return Status::OK();
      }
      return Error("expected ',' or '}'");
    }
  }

  Status ParseArray(Json& out, size_t depth) {
    if (depth > options_.max_depth) return Error("nesting deeper than the limit");
    ++pos_;  // '['
    Json::Array items;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      out = Json(std::move(items));
      return Status::OK();
    }
    while (true) {
      SkipSpace();
      Json value;
      KV_RETURN_IF_ERROR(ParseValue(value, depth));
      items.push_back(std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated array");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        out = Json(std::move(items));
        return Status::OK();
      }
      return Error("expected ',' or ']'");
    }
  }

  Result<uint32_t> ParseHex4() {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return Error("bad hex digit in \\u escape");
    }
    return v;
  }

  static void AppendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Status ParseEscape(std::string& out) {
    if (pos_ >= text_.size()) return Error("unterminated string");
    const char c = text_[pos_++];
    switch (c) {
      case '"': out += '"'; return Status::OK();
      case '\\': out += '\\'; return Status::OK();
      case '/': out += '/'; return Status::OK();
      case 'b': out += '\b'; return Status::OK();
      case 'f': out += '\f'; return Status::OK();
      case 'n': out += '\n'; return Status::OK();
      case 'r': out += '\r'; return Status::OK();
      case 't': out += '\t'; return Status::OK();
      case 'u': break;
      default: --pos_; return Error("invalid escape");
    }
    KV_ASSIGN_OR_RETURN(uint32_t cp, ParseHex4());
    if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("unpaired low surrogate");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (!Consume("\\u")) return Error("unpaired high surrogate");
      KV_ASSIGN_OR_RETURN(uint32_t low, ParseHex4());
      if (low < 0xDC00 || low > 0xDFFF) return Error("unpaired high surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(out, cp);
    return Status::OK();
  }

  Status ParseString(std::string& out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return Status::OK();
      }
      if (c == '\\') {
        ++pos_;
        KV_RETURN_IF_ERROR(ParseEscape(out));
        continue;
      }
      if (c < 0x20) return Error("control character in string");
      const size_t n = Utf8SequenceLength(text_, pos_);
      if (n == 0) return Error("invalid UTF-8");
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  Status ParseNumber(Json& out) {
    const size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("invalid value");
    if (text_[pos_] == '0') {
      ++pos_;
      if (pos_ < text_.size() && IsDigit(text_[pos_])) return Error("leading zero in number");
    } else {
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("digit expected after '.'");
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("digit expected in exponent");
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t i;
      if (std::from_chars(first, last, i).ec == std::errc()) {
        out = Json(i);
        return Status::OK();
      }
      uint64_t u;
      if (*first != '-' && std::from_chars(first, last, u).ec == std::errc()) {
        out = Json(u);
        return Status::OK();
      }
    }
    // Deliberate difference, mirrored here: a magnitude below the smallest
    // double parses as 0 (strtod, as nlohmann) instead of failing.
    const double d = std::strtod(std::string(first, last).c_str(), nullptr);
    if (!std::isfinite(d)) {
      pos_ = start;
      return Error("number out of range");
    }
    out = Json(d);
    return Status::OK();
  }

  std::string_view text_;
  const Json::ParseOptions& options_;
  size_t pos_ = 0;
};

}  // namespace

Result<Json> ParseJson(std::string_view text, const Json::ParseOptions& options) {
  return Parser(text, options).ParseDocument();
}

}  // namespace kvstore::legacy
