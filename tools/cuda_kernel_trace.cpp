// A kernel-time summary without Nsight: a CUPTI injection library. CUDA loads it into any program
// started with CUDA_INJECTION64_PATH=<path to libcuda_kernel_trace.so>; it records every kernel,
// copy and memset between the program's cudaProfilerStart and cudaProfilerStop (kuiper's
// profile_range_begin/end; the whole run if the program never calls them) and prints, at exit,
// each kernel's count and time, and how much of the window the GPU was idle (launch gaps).
// Kernels launched overlapped (launch.cuh) start before the kernel ahead of them ends and wait,
// so their own times overlap; what each adds to a step is the time from the end of the work
// before it to its own end ("added"), which sums to the span of one stream's work.
// Several GPUs (a tensor-parallel run): the work of GPU 0 only, as every rank does the same.
#include <cupti.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <cxxabi.h>

namespace {

struct Interval {
  uint64_t start, end;
  std::string name;
};

struct Trace {
  std::mutex mutex;
  std::vector<Interval> intervals;
  uint64_t window_start = 0, window_end = UINT64_MAX;
  int windows = 0;
};

Trace& trace() {
  static Trace* t = new Trace;  // outlives the static destructors that run before CUPTI's flush
  return *t;
}

std::string readable(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  // Namespaces and parameter lists make names unreadable in a table, and would cut off the
  // template arguments that tell one decode GEMV from another.
  for (const std::string_view qualifier : {"kuiper::op::cuda::", "(anonymous namespace)::", "kuiper::op::"}) {
    for (size_t at = name.find(qualifier); at != std::string::npos; at = name.find(qualifier, at)) {
      name.erase(at, qualifier.size());
    }
  }
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        name.erase(i);
        break;
      }
    }
  }
  if (name.size() > 150) name = name.substr(0, 147) + "...";
  return name;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<Interval> found;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        if (k->deviceId == 0) found.push_back({k->start, k->end, readable(k->name)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        static const char* kinds[] = {"?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
        const unsigned kind = m->copyKind < 11 ? m->copyKind : 0;
        if (m->deviceId == 0) found.push_back({m->start, m->end, std::string("[copy ") + kinds[kind] + "]"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        if (m->deviceId == 0) found.push_back({m->start, m->end, "[memset]"});
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(trace().mutex);
  trace().intervals.insert(trace().intervals.end(), found.begin(), found.end());
}

void CUPTIAPI on_api(void*, CUpti_CallbackDomain, CUpti_CallbackId id, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  std::lock_guard<std::mutex> lock(trace().mutex);
  if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000 && info->callbackSite == CUPTI_API_EXIT) {
    // Several windows (a benchmark's repeats): keep the last, the one measured after warm-up.
    trace().window_start = now;
    trace().window_end = UINT64_MAX;
    ++trace().windows;
  } else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 && info->callbackSite == CUPTI_API_ENTER) {
    trace().window_end = now;
  }
}

void summarise() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Trace& t = trace();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<Interval> in;
  for (const Interval& i : t.intervals) {
    if (i.start >= t.window_start && i.end <= t.window_end) in.push_back(i);
  }
  if (in.empty()) {
    std::fprintf(stderr, "cuda_kernel_trace: no GPU work recorded in the window\n");
    return;
  }
  std::sort(in.begin(), in.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  const uint64_t first = in.front().start;
  uint64_t last = 0, busy = 0, covered_to = 0;
  struct Total {
    uint64_t ns = 0, added_ns = 0;
    int count = 0;
  };
  std::map<std::string, Total> by_name;
  std::map<std::string, uint64_t> idle_before;  // GPU idle time ended by each kernel: where launches lag
  for (const Interval& i : in) {
    if (covered_to > 0 && i.start > covered_to) idle_before[i.name] += i.start - covered_to;
    by_name[i.name].added_ns += i.end > covered_to ? i.end - std::max(covered_to, first) : 0;
    last = std::max(last, i.end);
    const uint64_t from = std::max(i.start, covered_to);
    if (i.end > from) busy += i.end - from;
    covered_to = std::max(covered_to, i.end);
    by_name[i.name].ns += i.end - i.start;
    ++by_name[i.name].count;
  }
  std::vector<std::pair<std::string, Total>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  const double span_us = (last - first) / 1e3;
  std::fprintf(stderr, "\ncuda_kernel_trace: the last of %d windows, first to last GPU activity %.1f us, GPU busy %.1f us (%.1f%%), idle %.1f us\n",
               t.windows, span_us, busy / 1e3, 100.0 * busy / (last - first), span_us - busy / 1e3);
  std::fprintf(stderr, "%12s %8s %10s %6s %11s  %s\n", "total us", "count", "mean us", "%", "added us", "kernel");
  for (const auto& [name, total] : rows) {
    std::fprintf(stderr, "%12.1f %8d %10.2f %6.2f %11.2f  %s\n", total.ns / 1e3, total.count,
                 total.ns / 1e3 / total.count, 100.0 * total.ns / busy, total.added_ns / 1e3 / total.count,
                 name.c_str());
  }
  std::vector<std::pair<std::string, uint64_t>> gaps(idle_before.begin(), idle_before.end());
  std::sort(gaps.begin(), gaps.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::fprintf(stderr, "idle GPU time, by the kernel or copy that ended it:\n");
  for (size_t k = 0; k < std::min<size_t>(gaps.size(), 10); ++k) {
    std::fprintf(stderr, "%12.1f us  %s\n", gaps[k].second / 1e3, gaps[k].first.c_str());
  }
}

}  // namespace

extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    cuptiActivityEnable(kind);
  }
  CUpti_SubscriberHandle subscriber;
  if (cuptiSubscribe(&subscriber, on_api, nullptr) == CUPTI_SUCCESS) {
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000);
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000);
  }
  std::atexit(summarise);
  return 1;
}
