#include "kuiper/base/full_dependency.h"

#include <algorithm>
#include <vector>

#include "kuiper/base/cuda_utils.h"

namespace kuiper {
namespace {

__global__ void wait_for_earlier_work() {}

struct Edges {
  std::vector<cudaGraphNode_t> to;
  std::vector<cudaGraphEdgeData> data;
};

Status edges_from(cudaGraphNode_t from, Edges& edges) {
  size_t count = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGraphNodeGetDependentNodes(from, nullptr, nullptr, &count));
  edges.to.resize(count);
  edges.data.resize(count);
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGraphNodeGetDependentNodes(from, edges.to.data(), edges.data.data(), &count));
  return ok_status();
}

// Replaces the programmatic edges out of `from` that are not in `kept` by full ones.
Status make_new_edges_full(cudaGraph_t graph, cudaGraphNode_t from, const Edges& kept) {
  Edges now;
  KUIPER_RETURN_IF_ERROR(edges_from(from, now));
  for (size_t i = 0; i < now.to.size(); ++i) {
    if (now.data[i].type != cudaGraphDependencyTypeProgrammatic) continue;
    if (std::find(kept.to.begin(), kept.to.end(), now.to[i]) != kept.to.end()) continue;
    const cudaGraphNode_t to = now.to[i];
    KUIPER_CUDA_RETURN_IF_ERROR(cudaGraphRemoveDependencies(graph, &from, &to, &now.data[i], 1));
    KUIPER_CUDA_RETURN_IF_ERROR(cudaGraphAddDependencies(graph, &from, &to, nullptr, 1));
  }
  return ok_status();
}

}  // namespace

Status queue_with_full_dependency(cudaStream_t stream, const std::function<Status()>& queue) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* last = nullptr;
  const cudaGraphEdgeData* last_edges = nullptr;  // asked for, or a programmatic edge makes the query fail
  size_t count = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaStreamGetCaptureInfo(stream, &capture, nullptr, &graph, &last, &last_edges, &count));
  if (capture != cudaStreamCaptureStatusActive) {
    wait_for_earlier_work<<<1, 1, 0, stream>>>();
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("wait_for_earlier_work");
    return queue();
  }
  const std::vector<cudaGraphNode_t> before(last, last + count);  // `last` is valid until the next capture
  std::vector<Edges> earlier(count);
  for (size_t i = 0; i < count; ++i) KUIPER_RETURN_IF_ERROR(edges_from(before[i], earlier[i]));
  KUIPER_RETURN_IF_ERROR(queue());
  for (size_t i = 0; i < count; ++i) KUIPER_RETURN_IF_ERROR(make_new_edges_full(graph, before[i], earlier[i]));
  return ok_status();
}

}  // namespace kuiper
