// status.h: the internal status type (code + message) and the thread-local "last error" behind kda_last_error().
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

#include "kda/kda.h"

namespace kda {

struct Status {
  kda_status_t code = KDA_STATUS_SUCCESS;
  std::string message;

  bool ok() const { return code == KDA_STATUS_SUCCESS; }
  static Status Ok() { return {}; }
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
inline Status make_status(kda_status_t code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return Status{code, buf};
}

// Records s as this thread's last error (or clears it on success) and returns its code.
kda_status_t set_last_status(const Status& s);

}  // namespace kda

#define KDA_RETURN_IF_ERROR(expr)     \
  do {                                \
    ::kda::Status _st = (expr);       \
    if (!_st.ok()) return _st;        \
  } while (0)
