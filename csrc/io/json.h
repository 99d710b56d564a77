// A small strict JSON parser (RFC 8259) for safetensors headers and checkpoint index files.
// Strict means: UTF-8 input only, no comments, no trailing commas, no leading zeros, no lone
// surrogates in \u escapes, no duplicate object keys, nothing after the value except whitespace,
// and bounded nesting depth and value count so hostile input cannot exhaust the stack or memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mb::io::json {

enum class Kind : uint8_t { Null, Bool, Number, String, Array, Object };
const char* kind_name(Kind k);  // "null", "a boolean", "a number", ...

struct Children;

// One parsed JSON value. Numbers keep their sign, the exact magnitude when the literal is an integer
// (no fraction, no exponent) that fits in uint64, and the nearest double (±inf when out of range).
struct Value {
  Kind kind = Kind::Null;
  bool boolean = false;    // Bool
  bool negative = false;   // Number: written with a leading '-'
  bool integral = false;   // Number: integer literal whose magnitude fits in uint64
  uint64_t magnitude = 0;  // Number: |value| when integral
  double number = 0.0;     // Number: the literal as the nearest double (signed)
  std::string str;         // String: decoded UTF-8
  std::unique_ptr<Children> children;  // Array / Object

  bool is(Kind k) const { return kind == k; }
  // Array elements / object values (empty for other kinds).
  const std::vector<Value>& items() const;
  // Object keys, parallel to items(), in document order (unique).
  const std::vector<std::string>& keys() const;
  size_t size() const { return items().size(); }
  // Object member by key, or nullptr (also for non-objects).
  const Value* find(std::string_view key) const;
  // True for a non-negative integer literal (no sign, fraction or exponent) that fits in uint64.
  bool is_unsigned_integer() const { return kind == Kind::Number && integral && !negative; }
};

struct Children {
  std::vector<std::string> keys;  // objects only
  std::vector<Value> items;
};

// Thrown for malformed input; `offset` is the byte position in the parsed text.
class ParseError : public std::runtime_error {
 public:
  ParseError(const std::string& msg, size_t offset) : std::runtime_error(msg), offset(offset) {}
  size_t offset;
};

struct Limits {
  int max_depth = 64;                // nested arrays/objects
  size_t max_values = size_t(1) << 21;  // total values: ~2M x 56 bytes bounds the parse tree (~250k tensors)
};

// Parses exactly one JSON value surrounded by optional whitespace. Validates UTF-8 first.
Value parse(std::string_view text, const Limits& limits = {});

// Position of the first byte that is not part of well-formed UTF-8 (no overlongs, no surrogates,
// nothing above U+10FFFF), or npos when the whole text is valid.
size_t find_invalid_utf8(std::string_view text);

// Renders a (possibly hostile) string for an error message: single-quoted, control bytes escaped as
// \xNN, and cut (on a UTF-8 boundary, marked with "...") after `max_bytes`.
std::string quote_text(std::string_view s, size_t max_bytes = 200);

}  // namespace mb::io::json
