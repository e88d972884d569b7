// The fake libc10.so (see fake_c10.h).
#include "fake_c10.h"

#include <utility>

extern "C" {
int fake_c10_alive = 0;
}

namespace c10 {

Error::Error(SourceLocation where, std::string msg)
    : what_(std::move(msg) + " (raised from " + where.function + " at " + where.file + ":" +
            std::to_string(where.line) + ")") {
  ++fake_c10_alive;
}

Error::~Error() { --fake_c10_alive; }

const char *Error::what() const noexcept { return what_.c_str(); }

} // namespace c10
