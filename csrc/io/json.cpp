#include "io/json.h"

#include <charconv>
#include <limits>
#include <system_error>
#include <unordered_set>
#include <version>

// Apple's libc++ has no floating-point std::from_chars before macOS 26 (nor __cpp_lib_to_chars):
// numbers are converted there by strtod_l in the C locale instead (see parse_number).
#if !defined(__cpp_lib_to_chars)
#include <locale.h>
#include <stdlib.h>
#if defined(__APPLE__)
#include <xlocale.h>
#endif
#endif

#include "core/errors.h"

namespace mb::io::json {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Null: return "null";
    case Kind::Bool: return "a boolean";
    case Kind::Number: return "a number";
    case Kind::String: return "a string";
    case Kind::Array: return "an array";
    case Kind::Object: return "an object";
  }
  return "?";
}

const std::vector<Value>& Value::items() const {
  static const std::vector<Value> none;
  return children ? children->items : none;
}

const std::vector<std::string>& Value::keys() const {
  static const std::vector<std::string> none;
  return children ? children->keys : none;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::Object || !children) return nullptr;
  for (size_t i = 0; i < children->keys.size(); ++i)
    if (children->keys[i] == key) return &children->items[i];
  return nullptr;
}

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0Fu; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07u; }
    else return i;  // continuation byte, overlong lead (C0/C1) or > F4
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0u) != 0x80u) return i;
      cp = (cp << 6) | (s[i + k] & 0x3Fu);
    }
    // Shortest form only, no UTF-16 surrogates, nothing past U+10FFFF.
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string quote_text(std::string_view s, size_t max_bytes) {
  size_t n = s.size();
  bool cut = n > max_bytes;
  if (cut) {
    n = max_bytes;
    // Step back over continuation bytes so a multi-byte character is never split.
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0u) == 0x80u) --n;
  }
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  out += cut ? "...'" : "'";
  return out;
}

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Recursive descent; recursion depth is bounded by limits.max_depth.
class Parser {
 public:
  Parser(std::string_view text, const Limits& limits) : t_(text), lim_(limits) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != t_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  std::string_view t_;
  Limits lim_;
  size_t pos_ = 0;
  size_t values_ = 0;

  [[noreturn]] void fail(const std::string& msg) const { throw ParseError(msg, pos_); }
  [[noreturn]] void fail_at(const std::string& msg, size_t at) const { throw ParseError(msg, at); }

  bool eof() const { return pos_ >= t_.size(); }
  char peek() const { return t_[pos_]; }

  void skip_ws() {
    while (!eof()) {
      char c = peek();
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  void expect_literal(std::string_view word) {
    if (t_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  Value parse_value(int depth) {
    if (++values_ > lim_.max_values) fail(cat("more than ", lim_.max_values, " JSON values"));
    if (eof()) fail("unexpected end of JSON");
    Value v;
    switch (peek()) {
      case '{': parse_object(v, depth + 1); break;
      case '[': parse_array(v, depth + 1); break;
      case '"': v.kind = Kind::String; v.str = parse_string(); break;
      case 't': expect_literal("true"); v.kind = Kind::Bool; v.boolean = true; break;
      case 'f': expect_literal("false"); v.kind = Kind::Bool; v.boolean = false; break;
      case 'n': expect_literal("null"); v.kind = Kind::Null; break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          parse_number(v);
        } else {
          fail("expected a JSON value");
        }
    }
    return v;
  }

  void enter(int depth) {
    if (depth > lim_.max_depth) fail(cat("JSON nested deeper than ", lim_.max_depth, " levels"));
  }

  void parse_object(Value& v, int depth) {
    enter(depth);
    v.kind = Kind::Object;
    v.children = std::make_unique<Children>();
    ++pos_;  // '{'
    skip_ws();
    if (!eof() && peek() == '}') { ++pos_; return; }
    std::unordered_set<std::string> seen;
    for (;;) {
      skip_ws();
      if (eof() || peek() != '"') fail("expected a string key in JSON object");
      size_t key_at = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) fail_at(cat("duplicate key ", quote_text(key), " in JSON object"), key_at);
      skip_ws();
      if (eof() || peek() != ':') fail("expected ':' after object key");
      ++pos_;
      skip_ws();
      Value item = parse_value(depth);
      v.children->keys.push_back(std::move(key));
      v.children->items.push_back(std::move(item));
      skip_ws();
      if (eof()) fail("unexpected end of JSON inside an object");
      if (peek() == ',') { ++pos_; continue; }
      if (peek() == '}') { ++pos_; return; }
      fail("expected ',' or '}' in JSON object");
    }
  }

  void parse_array(Value& v, int depth) {
    enter(depth);
    v.kind = Kind::Array;
    v.children = std::make_unique<Children>();
    ++pos_;  // '['
    skip_ws();
    if (!eof() && peek() == ']') { ++pos_; return; }
    for (;;) {
      skip_ws();
      v.children->items.push_back(parse_value(depth));
      skip_ws();
      if (eof()) fail("unexpected end of JSON inside an array");
      if (peek() == ',') { ++pos_; continue; }
      if (peek() == ']') { ++pos_; return; }
      fail("expected ',' or ']' in JSON array");
    }
  }

  uint32_t parse_hex4() {
    if (t_.size() - pos_ < 4) fail("truncated \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      char c = t_[pos_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= uint32_t(c - 'A' + 10);
      else fail("invalid hex digit in \\u escape");
    }
    return cp;
  }

  // The input is already known to be valid UTF-8, so multi-byte sequences are copied as they are.
  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (eof()) fail("unterminated JSON string");
      unsigned char c = static_cast<unsigned char>(t_[pos_]);
      if (c == '"') { ++pos_; return out; }
      if (c < 0x20) fail("control character in JSON string");
      if (c != '\\') { out += char(c); ++pos_; continue; }
      ++pos_;
      if (eof()) fail("unterminated escape in JSON string");
      char e = t_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          size_t at = pos_ - 2;
          uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at("lone low surrogate in \\u escape", at);
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            // A high surrogate must be followed by an escaped low surrogate.
            if (t_.substr(pos_, 2) != "\\u") fail_at("high surrogate not followed by a low surrogate", at);
            pos_ += 2;
            uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail_at("high surrogate not followed by a low surrogate", at);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("invalid escape in JSON string");
      }
    }
  }

  // Grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  void parse_number(Value& v) {
    v.kind = Kind::Number;
    const size_t start = pos_;
    auto digit = [&] { return !eof() && peek() >= '0' && peek() <= '9'; };
    if (peek() == '-') { v.negative = true; ++pos_; }
    if (!digit()) fail("expected a digit in JSON number");
    bool fits = true;
    uint64_t mag = 0;
    if (peek() == '0') {
      ++pos_;
      if (digit()) fail("leading zero in JSON number");
    } else {
      while (digit()) {
        uint64_t d = uint64_t(peek() - '0');
        if (mag > (UINT64_MAX - d) / 10) fits = false;
        else mag = mag * 10 + d;
        ++pos_;
      }
    }
    bool integer = true;
    if (!eof() && peek() == '.') {
      integer = false;
      ++pos_;
      if (!digit()) fail("expected a digit after '.' in JSON number");
      while (digit()) ++pos_;
    }
    if (!eof() && (peek() == 'e' || peek() == 'E')) {
      integer = false;
      ++pos_;
      if (!eof() && (peek() == '+' || peek() == '-')) ++pos_;
      if (!digit()) fail("expected a digit in JSON number exponent");
      while (digit()) ++pos_;
    }
    v.integral = integer && fits;
    v.magnitude = v.integral ? mag : 0;
    // Locale-independent; a literal beyond double's range gives ±inf (from_chars reports it, value unset).
    const char* first = t_.data() + start;
    const char* last = t_.data() + pos_;
#if defined(__cpp_lib_to_chars)
    auto [ptr, ec] = std::from_chars(first, last, v.number);
    if (ec == std::errc::result_out_of_range) {
      // from_chars leaves the value unset: underflow (tiny exponent) is 0, overflow is ±inf.
      bool tiny = false;
      for (const char* c = first; c < last; ++c)
        if (*c == 'e' || *c == 'E') tiny = c + 1 < last && c[1] == '-';
      v.number = tiny ? 0.0 : std::numeric_limits<double>::infinity();
      if (v.negative) v.number = -v.number;
    }
#else
    // Same results as the branch above: strtod rounds correctly, gives ±inf on overflow and the subnormal
    // or ±0 on underflow. The copy ends the literal: the text is no C string (a mapped header).
    static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
    v.number = strtod_l(std::string(first, last).c_str(), nullptr, c_locale);
#endif
  }
};

}  // namespace

Value parse(std::string_view text, const Limits& limits) {
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) throw ParseError("invalid UTF-8", bad);
  return Parser(text, limits).parse_document();
}

}  // namespace mb::io::json
