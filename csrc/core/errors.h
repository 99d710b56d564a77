// Error hierarchy shared by every layer; mapped 1:1 to Python (markbase.MarkbaseError and subclasses).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace mb {

class MarkbaseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A checkpoint file or directory is malformed, incomplete or inconsistent.
class CheckpointError : public MarkbaseError { using MarkbaseError::MarkbaseError; };
// config.json (or another configuration) is unknown or inconsistent.
class ConfigError : public MarkbaseError { using MarkbaseError::MarkbaseError; };
// A caller passed arguments the operation cannot accept (shape, dtype, range).
class InputError : public MarkbaseError { using MarkbaseError::MarkbaseError; };
// The requested device is not available or failed.
class DeviceError : public MarkbaseError { using MarkbaseError::MarkbaseError; };
// A computation produced NaN or Inf (the message names where, when a trace located it).
class NumericsError : public MarkbaseError { using MarkbaseError::MarkbaseError; };

// Builds a message from stream-able parts: throw InputError(cat("linear: x has ", n, " dims")).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

}  // namespace mb
