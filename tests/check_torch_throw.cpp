// check_torch_throw: the exceptions the PyTorch plug-in throws (plugin/spool_torch_throw.cc), seen
// from C++ as PyTorch sees them, through the plug-in's C frames.
//  - Without PyTorch's libraries in the process: std::runtime_error with spool's message.
//  - With stand-ins for libc10.so and libc10_cuda.so (tests/fake_c10/: the same exported names
//    and class shapes), loaded RTLD_LOCAL as PyTorch loads them: an out-of-memory failure is a
//    c10::OutOfMemoryError built by the plug-in's recipe (constructor from libc10, vtable and
//    type_info from libc10_cuda, destructor from the vtable), with spool's message and where it
//    was raised; other failures stay std::runtime_error; a missing library means the fallback.
// The real thing (PyTorch on a GPU) is python/tests/test_spool_torch.py.
//
// Built against cudasim only (label sim): out of memory is a max_size pool there.
#include "test_main.h"

#include "spool_torch.h"

#include <dlfcn.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <typeinfo>

#ifndef FAKE_C10_PATH
#error "FAKE_C10_PATH and FAKE_C10_CUDA_PATH must name the fake libraries (tests/CMakeLists.txt)"
#endif

namespace {

void setup() {
  ck_assert_int_eq(spool_torch_configure("max_size=64MiB, cache=off, oom_retries=0"), 0);
}

void teardown() { (void)spool__torch_forget(); }

bool has(const char *text, const char *word) { return std::strstr(text, word) != nullptr; }

// What an allocation too large for the pool throws: its dynamic type's name and its what().
struct caught {
  std::string type, what;
  int alive_inside = -1; // fake_c10_alive while the exception lives, when the fakes are loaded
};

caught oom_from_alloc(int *alive) {
  caught c;
  try {
    void *p = spool_torch_alloc(128 * MiB, 0, nullptr);
    ck_abort_msg("spool_torch_alloc returned %p instead of throwing", p);
  } catch (const std::exception &e) { // what PyTorch's handlers catch at the end
    c.type = typeid(e).name();
    c.what = e.what();
    if (alive) c.alive_inside = *alive;
  }
  return c;
}

void *open_local(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(h != nullptr, "dlopen %s: %s", path, dlerror());
  return h;
}

// The plug-in still works after a throw: an allocation that fits, freed, and nothing left.
void still_usable() {
  void *p = spool_torch_alloc(16 * MiB, 0, nullptr);
  ck_assert_ptr_nonnull(p);
  spool_torch_free(p, 16 * MiB, 0, nullptr);
  ck_assert_int_eq(spool__torch_forget(), 0);
}

} // namespace

START_TEST(without_torch_runtime_error) {
  caught c = oom_from_alloc(nullptr);
  ck_assert_str_eq(c.type.c_str(), typeid(std::runtime_error).name());
  ck_assert_msg(has(c.what.c_str(), "spool_alloc: out of device memory: asked 128.00 MiB"), "%s",
                c.what.c_str());
  ck_assert_msg(has(c.what.c_str(), "limit 64.00 MiB"), "%s", c.what.c_str());
  try {
    spool_torch_set_memory_fraction(2.0, 0);
    ck_abort_msg("no throw");
  } catch (const std::runtime_error &e) {
    ck_assert_msg(has(e.what(), "fraction 2 is not between 0 and 1"), "%s", e.what());
  }
  still_usable();
}
END_TEST

// libc10.so alone (no OutOfMemoryError vtable anywhere): the fallback.
START_TEST(c10_without_cuda_part_runtime_error) {
  void *c10 = open_local(FAKE_C10_PATH);
  caught c = oom_from_alloc(nullptr);
  ck_assert_str_eq(c.type.c_str(), typeid(std::runtime_error).name());
  ck_assert_msg(has(c.what.c_str(), "spool_alloc: out of device memory"), "%s", c.what.c_str());
  still_usable();
  dlclose(c10);
}
END_TEST

START_TEST(with_c10_out_of_memory_error) {
  void *cuda = open_local(FAKE_C10_CUDA_PATH); // brings libc10.so along (its DT_NEEDED)
  void *c10 = dlopen("libc10.so", RTLD_NOLOAD | RTLD_LAZY);
  ck_assert_ptr_nonnull(c10);
  int *alive = static_cast<int *>(dlsym(c10, "fake_c10_alive"));
  ck_assert_ptr_nonnull(alive);
  caught c = oom_from_alloc(alive);
  ck_assert_str_eq(c.type.c_str(), "N3c1016OutOfMemoryErrorE");
  ck_assert_msg(has(c.what.c_str(), "spool_alloc: out of device memory: asked 128.00 MiB"), "%s",
                c.what.c_str());
  // The SourceLocation went through by value: function, file and line as the plug-in gave them.
  ck_assert_msg(has(c.what.c_str(), "(raised from spool_torch_alloc at "), "%s", c.what.c_str());
  ck_assert_msg(has(c.what.c_str(), "spool_torch.c:"), "%s", c.what.c_str());
  ck_assert_int_eq(c.alive_inside, 1);
  ck_assert_int_eq(*alive, 0); // destroyed at the end of the handler, by the vtable's destructor
  // Failures other than out of memory stay std::runtime_error.
  try {
    (void)spool_torch_alloc(64, -1, nullptr);
    ck_abort_msg("no throw");
  } catch (const std::runtime_error &e) {
    ck_assert_msg(has(e.what(), "device -1 is out of range"), "%s", e.what());
  }
  ck_assert_int_eq(*alive, 0);
  still_usable();
  dlclose(c10);
  dlclose(cuda);
}
END_TEST

int main() {
  Suite *s = suite_create("torch_throw");
  TCase *tc = test_tcase("throw");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, without_torch_runtime_error);
  tcase_add_test(tc, c10_without_cuda_part_runtime_error);
  tcase_add_test(tc, with_c10_out_of_memory_error);
  suite_add_tcase(s, tc);
  return test_main(s);
}
