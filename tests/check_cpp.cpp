/* check_cpp: the C++ layer, include/spool/spool.hpp: spool::error, spool::config, spool::pool
 * and spool::buffer<T> (ownership, moves, sizes, stream-ordered frees, call sites, errors as
 * exceptions with the C status).
 *
 * Built twice, like the C suites: check_cpp_sim (cudasim, SPOOL_TEST_SIM) and check_cpp_gpu
 * (real CUDA; exits 77 without a device). It uses the C suites' harness, test_main.h, which
 * compiles as C++ (Check's header has extern "C" guards). Tests outside `#ifdef SPOOL_TEST_SIM`
 * must hold on a real device too.
 *
 * In the gpu build Check runs the tests in one process (CK_NOFORK) and a failed assertion
 * longjmps out of the test, skipping the destructors of its spool::pool and spool::buffer
 * objects: after a failure the later tests may see a leaked pool. Passing runs are clean. */
#include "test_main.h"

#include <spool/spool.hpp>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------- */

/* What a call threw: its status and message; status SPOOL_STATUS_COUNT when it did not throw a
 * spool::error. */
struct thrown {
  spool_status status = SPOOL_STATUS_COUNT;
  std::string what;
  std::string name;
};

template <class F>
static thrown throws(F &&f) {
  thrown t;
  try {
    f();
  } catch (const spool::error &e) {
    t.status = e.status();
    t.what = e.what();
    t.name = e.name();
  }
  return t;
}

/* f throws a spool::error with status want whose what() has word (word NULL: any text). */
#define CK_THROWS(call, want, word)                                                           \
  do {                                                                                        \
    thrown ck_t_ = throws([&] { call; });                                                     \
    ck_assert_msg(ck_t_.status == (want), "%s threw %s (\"%s\"), expected %s", #call,         \
                  ck_t_.status == SPOOL_STATUS_COUNT ? "nothing"                              \
                                                     : spool_status_name(ck_t_.status),       \
                  ck_t_.what.c_str(), spool_status_name(want));                               \
    const char *ck_w_ = (word);                                                               \
    if (ck_w_)                                                                                \
      ck_assert_msg(ck_t_.what.find(ck_w_) != std::string::npos, "\"%s\" lacks \"%s\"",       \
                    ck_t_.what.c_str(), ck_w_);                                               \
  } while (0)

static spool::config config_with(const char *text) {
  spool::config cfg;
  cfg.parse(text);
  return cfg;
}

/* The whole of f (a tmpfile), from the start. */
static std::string slurp(FILE *f) {
  ck_assert_int_eq(fflush(f), 0);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  rewind(f);
  std::string text(static_cast<size_t>(n), '\0');
  ck_assert_uint_eq(fread(&text[0], 1, text.size(), f), text.size());
  return text;
}

static std::string slurp_path(const std::string &path) {
  FILE *f = fopen(path.c_str(), "rb");
  ck_assert_ptr_nonnull(f);
  std::string text = slurp(f);
  fclose(f);
  return text;
}

static std::string leak_report(const spool::pool &p) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  p.leaks(f);
  std::string text = slurp(f);
  fclose(f);
  return text;
}

static std::string site_of(const char *file, int line) {
  return std::string(file) + ":" + std::to_string(line);
}

#define CK_TEXT_HAS(text, word)                                                               \
  ck_assert_msg((text).find(word) != std::string::npos, "text lacks \"%s\":\n%s",              \
                std::string(word).c_str(), (text).c_str())

/* The counters that say what is live. */
static void check_live(const spool::pool &p, uint64_t bytes, uint64_t buffers, uint64_t allocs,
                       uint64_t frees) {
  spool_stats st = p.stats();
  ck_assert_uint_eq(st.size, sizeof(spool_stats));
  ck_assert_uint_eq(st.bytes_in_use, bytes);
  ck_assert_uint_eq(st.buffers_in_use, buffers);
  ck_assert_uint_eq(st.allocs, allocs);
  ck_assert_uint_eq(st.frees, frees);
  ck_assert_uint_eq(st.bad_frees, 0);
}

struct vec3 {
  float x, y, z;
};

/* ---- types ----------------------------------------------------------------------------------- */

static_assert(!std::is_copy_constructible<spool::pool>::value, "pool is move-only");
static_assert(!std::is_copy_assignable<spool::pool>::value, "pool is move-only");
static_assert(std::is_nothrow_move_constructible<spool::pool>::value, "pool moves");
static_assert(std::is_nothrow_move_assignable<spool::pool>::value, "pool moves");
static_assert(std::is_nothrow_destructible<spool::pool>::value, "~pool never throws");
static_assert(!std::is_copy_constructible<spool::buffer<int>>::value, "buffer is move-only");
static_assert(!std::is_copy_assignable<spool::buffer<int>>::value, "buffer is move-only");
static_assert(std::is_nothrow_move_constructible<spool::buffer<int>>::value, "buffer moves");
static_assert(std::is_nothrow_move_assignable<spool::buffer<int>>::value, "buffer moves");
static_assert(std::is_nothrow_destructible<spool::buffer<int>>::value, "~buffer never throws");
static_assert(std::is_base_of<std::runtime_error, spool::error>::value, "error is runtime_error");

/* ---- config ---------------------------------------------------------------------------------- */

START_TEST(config_defaults_and_parse) {
  spool::config cfg;
  spool_config want;
  spool_config_init(&want);
  ck_assert_uint_eq(cfg.get().release_threshold, want.release_threshold);
  ck_assert_int_eq(cfg->track, SPOOL_TRACK_COUNTS);
  spool::config &same = cfg.parse("reserve=1MiB").parse(std::string("track=full, oom_retries=5"));
  ck_assert_ptr_eq(&same, &cfg);
  ck_assert_uint_eq(cfg.get().reserve, 1 * MiB);
  ck_assert_int_eq(cfg.get().track, SPOOL_TRACK_FULL);
  ck_assert_uint_eq(cfg.get().oom_retries, 5);
  cfg.get().poison = true;
  cfg.validate();

  /* str() reads back to the same settings. */
  spool::config back;
  back.parse(cfg.str());
  const std::string text = cfg.str();
  CK_TEXT_HAS(text, "reserve");
  const std::string text_back = back.str();
  ck_assert_str_eq(text_back.c_str(), text.c_str());
  ck_assert(back.get().poison);

  /* From a C struct. */
  spool::config copy(cfg.get());
  ck_assert_uint_eq(copy->reserve, 1 * MiB);
}
END_TEST

START_TEST(config_errors_throw) {
  spool::config cfg;
  cfg.parse("reserve=2MiB");
  /* A parse error: SPOOL_ERR_CONFIG, the message names the key, the settings are unchanged. */
  CK_THROWS(cfg.parse("reserve=1MiB\nrelease_treshold=4GiB"), SPOOL_ERR_CONFIG,
            "release_treshold");
  CK_THROWS(cfg.parse("reserve=lots"), SPOOL_ERR_CONFIG, "reserve");
  ck_assert_uint_eq(cfg->reserve, 2 * MiB);
  thrown t = throws([&] { cfg.parse("track=sometimes"); });
  ck_assert_str_eq(t.name.c_str(), "SPOOL_ERR_CONFIG");
  /* The exception keeps its text when a later call fails differently. */
  spool::error kept(SPOOL_OK, "");
  try {
    cfg.parse("bogus_key=1");
  } catch (const spool::error &e) {
    kept = e;
  }
  ck_assert_int_eq(kept.status(), SPOOL_ERR_CONFIG);
  CK_THROWS(cfg.load("/nonexistent/spool.conf"), SPOOL_ERR_IO, "/nonexistent/spool.conf");
  ck_assert_msg(std::string(kept.what()).find("bogus_key") != std::string::npos, "%s",
                kept.what());
  /* NULL text: SPOOL_ERR_INVALID. */
  CK_THROWS(cfg.parse(static_cast<const char *>(nullptr)), SPOOL_ERR_INVALID, nullptr);
  /* Settings that contradict each other. */
  spool::config bad;
  bad.parse("release_threshold=1MiB, reserve=2MiB");
  CK_THROWS(bad.validate(), SPOOL_ERR_CONFIG, "reserve");
  CK_THROWS(spool::pool{bad}, SPOOL_ERR_CONFIG, "reserve");
}
END_TEST

START_TEST(config_load_and_env) {
  char path[] = "/tmp/spool_check_cpp_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char text[] = "# test\nreserve = 4MiB\ntrack = off\n";
  ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
  close(fd);
  spool::config cfg;
  cfg.load(std::string(path));
  ck_assert_uint_eq(cfg->reserve, 4 * MiB);
  ck_assert_int_eq(cfg->track, SPOOL_TRACK_OFF);
  unlink(path);

  ck_assert_int_eq(setenv("SPOOL_CONF", "track=full", 1), 0);
  cfg.from_env();
  ck_assert_int_eq(cfg->track, SPOOL_TRACK_FULL);
  ck_assert_uint_eq(cfg->reserve, 4 * MiB);
  ck_assert_int_eq(setenv("SPOOL_CONF", "track=fuller", 1), 0);
  CK_THROWS(cfg.from_env(), SPOOL_ERR_CONFIG, "SPOOL_CONF");
  ck_assert_int_eq(cfg->track, SPOOL_TRACK_FULL);
  unsetenv("SPOOL_CONF");
}
END_TEST

/* ---- pool ------------------------------------------------------------------------------------ */

START_TEST(pool_lifecycle) {
  {
    spool::pool p{config_with("track=full")};
    ck_assert_ptr_nonnull(p.get());
    ck_assert(static_cast<bool>(p));
    ck_assert_ptr_nonnull(p.handle());
    ck_assert_ptr_eq(p.handle(), spool_pool_handle(p.get()));
    ck_assert_int_eq(p.device(), 0);
    ck_assert_ptr_nonnull(p.settings());
    ck_assert_int_eq(p.settings()->track, SPOOL_TRACK_FULL);
#ifdef SPOOL_TEST_SIM
    ck_assert_int_eq(cudasim_pool_count(), 1);
#endif
  }
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0); /* the destructor destroyed it */
#endif
  /* destroy() now, with its status; then the pool is empty and a second destroy does nothing. */
  spool::pool p{spool::config{}};
  ck_assert_int_eq(p.destroy(), SPOOL_OK);
  ck_assert_ptr_null(p.get());
  ck_assert(!p);
  ck_assert_int_eq(p.destroy(), SPOOL_OK);
  ck_assert_ptr_null(p.handle());
  ck_assert_int_eq(p.device(), -1);
  ck_assert_ptr_null(p.settings());
  CK_THROWS(p.stats(), SPOOL_ERR_INVALID, nullptr);
  CK_THROWS(p.trim(), SPOOL_ERR_INVALID, nullptr);
  CK_THROWS((void)p.alloc<int>(4, nullptr), SPOOL_ERR_INVALID, nullptr);

  /* Default construction: the defaults, then SPOOL_CONF; a config is taken as it is. */
  ck_assert_int_eq(setenv("SPOOL_CONF", "track=full", 1), 0);
  {
    spool::pool d;
    ck_assert_int_eq(d.settings()->track, SPOOL_TRACK_FULL);
    spool::pool e{spool::config{}};
    ck_assert_int_eq(e.settings()->track, SPOOL_TRACK_COUNTS);
    spool_config raw;
    spool_config_init(&raw);
    raw.track = SPOOL_TRACK_OFF;
    spool::pool f{raw};
    ck_assert_int_eq(f.settings()->track, SPOOL_TRACK_OFF);
  }
  ck_assert_int_eq(setenv("SPOOL_CONF", "track=maybe", 1), 0);
  CK_THROWS(spool::pool{}, SPOOL_ERR_CONFIG, "SPOOL_CONF");
  unsetenv("SPOOL_CONF");

  /* No such device: SPOOL_ERR_NO_DEVICE, and nothing to destroy. */
  CK_THROWS(spool::pool{config_with("device=4096")}, SPOOL_ERR_NO_DEVICE, nullptr);
}
END_TEST

START_TEST(pool_move) {
  spool::pool a{spool::config{}};
  spool_pool *raw = a.get();
  spool::pool b{std::move(a)};
  ck_assert_ptr_null(a.get()); /* NOLINT(bugprone-use-after-move): moved-from is empty */
  ck_assert_ptr_eq(b.get(), raw);
  {
    spool::pool c{spool::config{}};
#ifdef SPOOL_TEST_SIM
    ck_assert_int_eq(cudasim_pool_count(), 2);
#endif
    c = std::move(b); /* destroys c's own pool */
#ifdef SPOOL_TEST_SIM
    ck_assert_int_eq(cudasim_pool_count(), 1);
#endif
    ck_assert_ptr_eq(c.get(), raw);
    ck_assert_ptr_null(b.get());
    check_live(c, 0, 0, 0, 0);
  }
  /* c destroyed the pool; a and b, empty, destroy nothing when they go. */
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0);
#endif
  ck_assert_int_eq(a.destroy(), SPOOL_OK);
  ck_assert_int_eq(b.destroy(), SPOOL_OK);
}
END_TEST

START_TEST(pool_raw_ownership) {
  spool_pool *raw = NULL;
  CK_SPOOL(spool_pool_create(&raw, NULL));
  spool::pool p = spool::pool::from_raw(raw);
  ck_assert_ptr_eq(p.get(), raw);
  spool_pool *back = p.release();
  ck_assert_ptr_eq(back, raw);
  ck_assert_ptr_null(p.get());
  CK_SPOOL(spool_pool_destroy(back));
}
END_TEST

START_TEST(pool_adopt_default) {
  cudaMemPool_t h = NULL;
  CK_CUDA(cudaDeviceGetDefaultMemPool(&h, 0));
  uint64_t threshold = test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold);
  {
    spool::pool p = spool::pool::adopt(h, config_with("release_threshold=8MiB"));
    ck_assert_ptr_eq(p.handle(), h);
    ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), 8 * MiB);
  }
  /* Not destroyed (still usable), and its settings are put back for the next tests. */
  test_pool_set_attr_u64(h, cudaMemPoolAttrReleaseThreshold, threshold);
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), threshold);
  CK_THROWS(spool::pool::adopt(NULL, spool::config{}), SPOOL_ERR_INVALID, nullptr);
}
END_TEST

START_TEST(pool_stats_report_trim) {
  spool::pool p{spool::config{}};
  cudaStream_t s = test_stream_create();
  spool_stats st = p.stats();
  ck_assert_uint_eq(st.size, sizeof(spool_stats));
  ck_assert_uint_eq(st.allocs, 0);
  {
    auto a = p.alloc<char>(3 * MiB, s);
    auto b = p.alloc<char>(1 * MiB, s);
    st = p.stats();
    ck_assert_uint_eq(st.bytes_in_use, 4 * MiB);
    ck_assert_uint_eq(st.bytes_in_use_peak, 4 * MiB);
    ck_assert_uint_eq(st.buffers_in_use, 2);
    ck_assert_uint_ge(st.bytes_reserved, 4 * MiB);
    ck_assert_uint_eq(st.bytes_allocated, 4 * MiB);
  }
  check_live(p, 0, 0, 2, 2);
  ck_assert_uint_eq(p.stats().bytes_in_use_peak, 4 * MiB);
  p.reset_peaks();
  ck_assert_uint_eq(p.stats().bytes_in_use_peak, 0);

  /* both in the stream's front: a stream of brief buffers keeps up to its peak in use there
   * (front_brief), past front_limit */
  ck_assert_uint_eq(p.stats().bytes_front, 4 * MiB);
  ck_assert_uint_ge(p.stats().bytes_cached, 4 * MiB);
  p.release_stream(s);
  st = p.stats();
  ck_assert_uint_eq(st.bytes_cached, 0); /* their chunk went back to the pool */
  ck_assert_uint_eq(st.bytes_heap, 0);
  ck_assert_uint_eq(st.cache_flushes, 1);
  CK_CUDA(cudaStreamSynchronize(s));
  p.trim(0);
  p.trim();
  st = p.stats();
  ck_assert_uint_eq(st.trims, 2);
  ck_assert_uint_eq(st.bytes_reserved, 0);

  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  p.report(f);
  std::string text = slurp(f);
  fclose(f);
  ck_assert_msg(!text.empty(), "empty report");
  CK_TEXT_HAS(text, "device 0");
  CK_THROWS(p.report(nullptr), SPOOL_ERR_INVALID, nullptr);
  CK_TEXT_HAS(leak_report(p), "no live buffers");
  test_stream_destroy(s);
}
END_TEST

/* ---- buffer ---------------------------------------------------------------------------------- */

START_TEST(buffer_sizes) {
  spool::pool p{spool::config{}};
  cudaStream_t s = test_stream_create();
  {
    spool::buffer<float> f = p.alloc<float>(1000, s);
    ck_assert_ptr_nonnull(f.data());
    ck_assert(static_cast<bool>(f));
    ck_assert(!f.empty());
    ck_assert_uint_eq(f.size(), 1000);
    ck_assert_uint_eq(f.bytes(), 4000);
    ck_assert_uint_eq(reinterpret_cast<uintptr_t>(f.data()) % 256, 0);
    ck_assert_ptr_eq(static_cast<void *>(f.stream()), static_cast<void *>(s));
    ck_assert_ptr_eq(f.pool(), p.get());
    static_assert(std::is_same<decltype(f.data()), float *>::value, "data() is T *");

    auto v = p.alloc<vec3>(10, s);
    ck_assert_uint_eq(v.size(), 10);
    ck_assert_uint_eq(v.bytes(), 10 * sizeof(vec3));
    auto d = p.alloc<double>(1, s);
    ck_assert_uint_eq(d.bytes(), sizeof(double));
    spool::buffer<uint8_t> direct(p.get(), 77, s);
    ck_assert_uint_eq(direct.bytes(), 77);
    check_live(p, 4000 + 10 * sizeof(vec3) + sizeof(double) + 77, 4, 4, 0);

    /* The memory is usable on the stream. */
    CK_CUDA(cudaMemsetAsync(f.data(), 0, f.bytes(), s));
    std::vector<float> host(f.size(), 1.0f);
    CK_CUDA(cudaMemcpyAsync(host.data(), f.data(), f.bytes(), cudaMemcpyDeviceToHost, s));
    CK_CUDA(cudaStreamSynchronize(s));
    ck_assert(host[0] == 0.0f && host[999] == 0.0f);
  }
  /* Every destructor freed its buffer, once. */
  check_live(p, 0, 0, 4, 4);
  test_stream_destroy(s);
  ck_assert_int_eq(p.destroy(), SPOOL_OK); /* no leaks */
}
END_TEST

START_TEST(buffer_zero_count) {
  spool::pool p{spool::config{}};
  cudaStream_t s = test_stream_create();
  {
    auto z = p.alloc<int>(0, s);
    ck_assert_ptr_null(z.data());
    ck_assert_uint_eq(z.size(), 0);
    ck_assert_uint_eq(z.bytes(), 0);
    ck_assert(z.empty());
    ck_assert(!z);
    spool::buffer<int> e; /* default: empty, no pool */
    ck_assert_ptr_null(e.data());
    ck_assert_ptr_null(e.pool());
    e.reset(); /* nothing to free */
  }
  check_live(p, 0, 0, 0, 0); /* size 0 is neither an allocation nor a free */
  test_stream_destroy(s);
}
END_TEST

START_TEST(buffer_move) {
  spool::pool p{spool::config{}};
  cudaStream_t s = test_stream_create();
  {
    auto a = p.alloc<int>(100, s);
    int *raw = a.data();
    spool::buffer<int> b{std::move(a)};
    /* The moved-from buffer is empty and owns nothing. */
    ck_assert_ptr_null(a.data()); /* NOLINT(bugprone-use-after-move) */
    ck_assert_uint_eq(a.size(), 0);
    ck_assert_uint_eq(a.bytes(), 0);
    ck_assert_ptr_null(a.pool());
    ck_assert_ptr_null(static_cast<void *>(a.stream()));
    ck_assert_ptr_eq(b.data(), raw);
    ck_assert_uint_eq(b.size(), 100);
    ck_assert_ptr_eq(static_cast<void *>(b.stream()), static_cast<void *>(s));

    /* Move-assigning frees what the target held. */
    auto c = p.alloc<int>(50, s);
    check_live(p, 600, 2, 2, 0);
    c = std::move(b);
    check_live(p, 400, 1, 2, 1);
    ck_assert_ptr_eq(c.data(), raw);
    ck_assert_ptr_null(b.data()); /* NOLINT(bugprone-use-after-move) */
    /* Into an empty one: nothing freed. */
    a = std::move(c);
    check_live(p, 400, 1, 2, 1);
    ck_assert_ptr_eq(a.data(), raw);

    /* In a vector that grows (moves, as the move is noexcept). */
    std::vector<spool::buffer<int>> many;
    for (int i = 0; i < 20; i++) many.push_back(p.alloc<int>(static_cast<size_t>(i + 1), s));
    ck_assert_uint_eq(p.stats().buffers_in_use, 21);
    for (size_t i = 0; i < many.size(); i++) ck_assert_uint_eq(many[i].size(), i + 1);
    many.erase(many.begin(), many.begin() + 10);
    ck_assert_uint_eq(p.stats().buffers_in_use, 11);
  }
  /* Each buffer freed exactly once: no double frees (bad_frees 0), none left. */
  check_live(p, 0, 0, 22, 22);
  test_stream_destroy(s);
  ck_assert_int_eq(p.destroy(), SPOOL_OK);
}
END_TEST

START_TEST(buffer_release_and_site) {
  spool::pool p{config_with("track=counts")};
  cudaStream_t s = test_stream_create();
  const int line = __LINE__; auto b = p.alloc<int>(256, s);
  int *raw = b.release();
  ck_assert_ptr_nonnull(raw);
  ck_assert_ptr_null(b.data());
  ck_assert_uint_eq(b.size(), 0);
  ck_assert_ptr_null(b.pool());
  b.reset(); /* empty: frees nothing */
  check_live(p, 1024, 1, 1, 0);

  /* The leak report names this file and the allocating line. */
  std::string report = leak_report(p);
#if defined(SPOOL_HPP_BUILTIN_SITE)
  CK_TEXT_HAS(report, "check_cpp.cpp");
  CK_TEXT_HAS(report, site_of(__FILE__, line));
#else
  (void)line;
#endif
  /* SPOOL_POOL_ALLOC records the site on any compiler. */
  const int macro_line = __LINE__; auto m = SPOOL_POOL_ALLOC(p, char, 64, s);
  int *raw_m = reinterpret_cast<int *>(m.release());
  report = leak_report(p);
  CK_TEXT_HAS(report, site_of(__FILE__, macro_line));

  /* The caller frees what it took. */
  CK_SPOOL(spool_free(p.get(), raw, s));
  CK_SPOOL(spool_free(p.get(), raw_m, s));
  check_live(p, 0, 0, 2, 2);
  test_stream_destroy(s);
}
END_TEST

START_TEST(buffer_reset) {
  spool::pool p{spool::config{}};
  cudaStream_t s = test_stream_create();
  auto b = p.alloc<double>(64, s);
  check_live(p, 512, 1, 1, 0);
  b.reset();
  ck_assert_ptr_null(b.data());
  ck_assert_uint_eq(b.size(), 0);
  check_live(p, 0, 0, 1, 1);
  b.reset();
  check_live(p, 0, 0, 1, 1);

  /* A free that fails throws, and the buffer keeps owning what spool did not free. */
  auto c = p.alloc<double>(8, s);
  double *raw = c.data();
  CK_SPOOL(spool_free(p.get(), raw, s)); /* behind the buffer's back */
  CK_THROWS(c.reset(), SPOOL_ERR_DOUBLE_FREE, nullptr);
  ck_assert_ptr_eq(c.data(), raw);
  ck_assert_uint_eq(p.stats().bad_frees, 1);
  /* The destructor of such a buffer reports on stderr and does not throw. */
  { spool::buffer<double> doomed = std::move(c); }
  ck_assert_uint_eq(p.stats().bad_frees, 2);
  ck_assert_ptr_null(c.data()); /* NOLINT(bugprone-use-after-move) */
  test_stream_destroy(s);
}
END_TEST

START_TEST(buffer_set_stream) {
  spool::pool p{spool::config{}};
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  {
    auto b = p.alloc<float>(1024, s1);
    CK_CUDA(cudaMemsetAsync(b.data(), 0, b.bytes(), s1));
    /* The documented hand-off: s2 waits for s1's work on the buffer, then owns its free. */
    cudaEvent_t ev = NULL;
    CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK_CUDA(cudaEventRecord(ev, s1));
    CK_CUDA(cudaStreamWaitEvent(s2, ev, 0));
    b.set_stream(s2);
    ck_assert_ptr_eq(static_cast<void *>(b.stream()), static_cast<void *>(s2));
    CK_CUDA(cudaEventDestroy(ev));
  }
  check_live(p, 0, 0, 1, 1);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

START_TEST(pool_destroy_with_leaks) {
  /* A pool destroyed with a released buffer still in it: destroy() says SPOOL_ERR_LEAKS, the
   * report (here to a file) names the allocating line, and the destructor of a pool with leaks
   * does not throw. */
  char path[] = "/tmp/spool_check_cpp_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  spool::config cfg;
  snprintf(cfg->report, sizeof cfg->report, "%s", path);
  cudaStream_t s = test_stream_create();
  {
    spool::pool p{cfg};
    const int line = __LINE__; int *leaked = SPOOL_POOL_ALLOC(p, int, 16, s).release();
    ck_assert_ptr_nonnull(leaked);
    ck_assert_int_eq(p.destroy(), SPOOL_ERR_LEAKS);
    std::string report = slurp_path(path);
    CK_TEXT_HAS(report, site_of(__FILE__, line));
  }
  {
    spool::pool q{cfg};
    (void)q.alloc<int>(16, s).release();
  } /* ~pool: SPOOL_ERR_LEAKS, reported to the file, not thrown */
  /* Both destroys appended a report to the file. */
  std::string report = slurp_path(path);
  size_t reports = 0;
  for (size_t at = report.find("leak report"); at != std::string::npos;
       at = report.find("leak report", at + 1))
    reports++;
  ck_assert_uint_eq(reports, 2);
  unlink(path);
  test_stream_destroy(s);
}
END_TEST

START_TEST(buffer_errors) {
  spool::pool p{config_with("max_size=64MiB, oom_retries=0")};
  cudaStream_t s = test_stream_create();
  /* count * sizeof(T) overflows size_t: SPOOL_ERR_INVALID, found by the wrapper. */
  CK_THROWS((void)p.alloc<double>(SIZE_MAX / 4, s), SPOOL_ERR_INVALID, "overflow");
  ck_assert_uint_eq(p.stats().alloc_failures, 0);
  /* Out of memory: SPOOL_ERR_OOM with the C message, and no buffer. */
  {
    auto a = p.alloc<char>(32 * MiB, s);
    auto b = p.alloc<char>(32 * MiB, s);
    CK_CUDA(cudaStreamSynchronize(s));
    CK_THROWS((void)p.alloc<char>(32 * MiB, s), SPOOL_ERR_OOM, "out of device memory");
    spool_stats st = p.stats();
    ck_assert_uint_eq(st.ooms, 1);
    ck_assert_uint_eq(st.buffers_in_use, 2);
  }
  check_live(p, 0, 0, 2, 2);
  CK_THROWS(spool::buffer<int>(nullptr, 4, s), SPOOL_ERR_INVALID, nullptr);
  test_stream_destroy(s);
}
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(sim_injected_oom) {
  spool::pool p{config_with("oom_retries=0")};
  cudaStream_t s = test_stream_create();
  /* the heap's chunk, then the request alone */
  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  cudasim_fail("cudaMallocFromPoolAsync", 2, cudaErrorMemoryAllocation);
  thrown t = throws([&] { (void)p.alloc<float>(256 * KiB, s); });
  ck_assert_int_eq(t.status, SPOOL_ERR_OOM);
  ck_assert_str_eq(t.name.c_str(), "SPOOL_ERR_OOM");
  CK_TEXT_HAS(t.what, "asked 1.00 MiB");
  CK_TEXT_HAS(t.what, "after 0 retries");
  ck_assert_int_eq(cudasim_armed(), 0);
  check_live(p, 0, 0, 0, 0);
  ck_assert_uint_eq(p.stats().ooms, 1);
  /* Another CUDA failure: SPOOL_ERR_CUDA. */
  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorInvalidValue);
  CK_THROWS((void)p.alloc<float>(16, s), SPOOL_ERR_CUDA, "cudaErrorInvalidValue");
  /* The pool still works. */
  auto ok = p.alloc<float>(16, s);
  ck_assert_ptr_nonnull(ok.data());
  ok.reset();
  test_stream_destroy(s);
}
END_TEST

START_TEST(sim_no_device) {
  cudasim_set_device_count(0);
  CK_THROWS(spool::pool{}, SPOOL_ERR_NO_DEVICE, nullptr);
  ck_assert_int_eq(cudasim_pool_count(), 0);
}
END_TEST

START_TEST(sim_set_stream_frees_on_new_stream) {
  spool::pool p{spool::config{}.parse("cache=off")}; /* every free reaches the driver */
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  cudasim_hold(s1);
  cudasim_hold(s2);
  auto b = p.alloc<int>(1024, s1);
  long on1 = cudasim_pending(s1), on2 = cudasim_pending(s2);
  long frees = cudasim_calls("cudaFreeAsync");
  b.set_stream(s2);
  { spool::buffer<int> gone = std::move(b); } /* the destructor frees */
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees + 1);
  ck_assert_int_eq(cudasim_pending(s2), on2 + 1); /* the free waits on s2 ... */
  ck_assert_int_eq(cudasim_pending(s1), on1);     /* ... not on s1 */
  check_live(p, 0, 0, 1, 1);

  /* reset() likewise. */
  auto c = p.alloc<int>(8, s2);
  c.set_stream(s1);
  on1 = cudasim_pending(s1);
  on2 = cudasim_pending(s2);
  c.reset();
  ck_assert_int_eq(cudasim_pending(s1), on1 + 1);
  ck_assert_int_eq(cudasim_pending(s2), on2);
  cudasim_release(s1);
  cudasim_release(s2);
  ck_assert_int_eq(cudasim_pending(s1), 0);
  ck_assert_int_eq(cudasim_pending(s2), 0);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST
#endif /* SPOOL_TEST_SIM */


/* ---- scope and batch ------------------------------------------------------------------------- */

static_assert(!std::is_copy_constructible<spool::scope>::value, "scope is move-only");
static_assert(std::is_nothrow_move_constructible<spool::scope>::value, "scope moves");
static_assert(std::is_nothrow_destructible<spool::scope>::value, "~scope never throws");
static_assert(!std::is_copy_constructible<spool::batch>::value, "batch is move-only");
static_assert(std::is_nothrow_move_constructible<spool::batch>::value, "batch moves");

START_TEST(scope_raii) {
  spool::pool p{spool::config{}};
  cudaStream_t s = test_stream_create();
  {
    spool::scope outer = p.begin_scope(s);
    ck_assert(outer.stream() == s);
    float *a = outer.alloc<float>(1000);
    double *b = outer.alloc<double>(10);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(outer.alloc<int>(0));
    CK_CUDA(cudaMemsetAsync(a, 0, 1000 * sizeof(float), s));
    {
      spool::scope inner{p.get(), s};
      (void)inner.alloc<char>(100);
      ck_assert_uint_eq(p.stats().buffers_in_use, 2); /* a chunk each */
      CK_THROWS(outer.end(), SPOOL_ERR_INVALID, "open child"); /* inner still open */
    } /* ~inner */
    spool::scope moved = std::move(outer);
    ck_assert(!outer);
    CK_THROWS((void)outer.alloc<int>(1), SPOOL_ERR_INVALID, "empty scope");
    CK_THROWS((void)moved.alloc<double>(SIZE_MAX / 4), SPOOL_ERR_INVALID, "overflow");
    moved.end();
    ck_assert(!moved);
    moved.end(); /* empty: nothing */
  }
  ck_assert_uint_eq(p.stats().buffers_in_use, 0);
  p.destroy();
  test_stream_destroy(s);
}
END_TEST

START_TEST(batch_raii) {
  spool::pool p{spool::config{}};
  cudaStream_t s = test_stream_create();
  {
    spool::batch b = p.alloc_batch({100, 4096, 8}, s);
    ck_assert_uint_eq(b.count(), 3);
    ck_assert_uint_eq(b.bytes(1), 4096);
    ck_assert_uint_eq(reinterpret_cast<uintptr_t>(b.get<float>(1)) -
                          reinterpret_cast<uintptr_t>(b.get(0)), 256);
    ck_assert_uint_eq(p.stats().buffers_in_use, 1);
    CK_STATUS(spool_free(p.get(), b.get(2), s), SPOOL_ERR_BATCH_MEMBER);
    spool::batch moved = std::move(b);
    ck_assert_uint_eq(b.count(), 0);
    ck_assert_ptr_null(b.get(0));
    ck_assert_uint_eq(moved.count(), 3);
    spool::batch other = p.alloc_batch({16, 16}, s, 16);
    ck_assert_uint_eq(reinterpret_cast<uintptr_t>(other.get(1)) -
                          reinterpret_cast<uintptr_t>(other.get(0)), 16);
    other.reset();
    ck_assert_uint_eq(other.count(), 0);
  } /* ~moved */
  ck_assert_uint_eq(p.stats().buffers_in_use, 0);
  CK_THROWS((void)p.alloc_batch({1, 2}, s, 3), SPOOL_ERR_INVALID, "alignment 3");
  p.destroy();
  test_stream_destroy(s);
}
END_TEST

START_TEST(pool_hand_off) {
  spool::pool p{spool::config{}};
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = nullptr, *b = nullptr;
  CK_SPOOL(spool_alloc(p.get(), &a, 4096, s1));
  CK_SPOOL(spool_alloc(p.get(), &b, 4096, s1));
  p.record_stream(a, s2);
  CK_SPOOL(spool_free(p.get(), a, s1)); /* through the hand-off */
  cudaEvent_t ev;
  CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK_CUDA(cudaEventRecord(ev, s2));
  p.free_after(b, s1, ev);
  CK_THROWS(p.free_after(b, s1, nullptr), SPOOL_ERR_INVALID, "event is NULL");
  CK_CUDA(cudaEventDestroy(ev));
  ck_assert_uint_eq(p.stats().buffers_in_use, 0);
  p.destroy();
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------- */

static Suite *cpp_suite(void) {
  Suite *s = suite_create("cpp");
  TCase *tc = test_tcase("config");
  tcase_add_test(tc, config_defaults_and_parse);
  tcase_add_test(tc, config_errors_throw);
  tcase_add_test(tc, config_load_and_env);
  suite_add_tcase(s, tc);

  tc = test_tcase("pool");
  tcase_add_test(tc, pool_lifecycle);
  tcase_add_test(tc, pool_move);
  tcase_add_test(tc, pool_raw_ownership);
  tcase_add_test(tc, pool_adopt_default);
  tcase_add_test(tc, pool_stats_report_trim);
  suite_add_tcase(s, tc);

  tc = test_tcase("buffer");
  tcase_add_test(tc, buffer_sizes);
  tcase_add_test(tc, buffer_zero_count);
  tcase_add_test(tc, buffer_move);
  tcase_add_test(tc, buffer_release_and_site);
  tcase_add_test(tc, buffer_reset);
  tcase_add_test(tc, buffer_set_stream);
  tcase_add_test(tc, pool_destroy_with_leaks);
  tcase_add_test(tc, buffer_errors);
  suite_add_tcase(s, tc);

  tc = test_tcase("scope_batch");
  tcase_add_test(tc, scope_raii);
  tcase_add_test(tc, batch_raii);
  tcase_add_test(tc, pool_hand_off);
  suite_add_tcase(s, tc);

#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim");
  tcase_add_test(tc, sim_injected_oom);
  tcase_add_test(tc, sim_no_device);
  tcase_add_test(tc, sim_set_stream_frees_on_new_stream);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) { return test_main(cpp_suite()); }
