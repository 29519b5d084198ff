#include "kuiper/op/weight.h"

#include "kuiper/base/device.h"

namespace kuiper::op {
namespace {

// Columns [first, last) of every row of the host matrix `from` [rows, cols] into a new one.
StatusOr<Tensor> copy_columns(const Tensor& from, int64_t first, int64_t last, Allocator& alloc) {
  const int64_t rows = from.dim(0), cols = from.dim(1), width = last - first;
  KUIPER_ASSIGN_OR_RETURN(Tensor to, Tensor::empty(from.dtype(), {rows, width}, alloc));
  const size_t elem = dtype_size(from.dtype());
  KUIPER_RETURN_IF_ERROR(copy_rows(to.raw_data(), width * elem, static_cast<const uint8_t*>(from.raw_data()) + first * elem,
                                   cols * elem, width * elem, rows, DeviceType::kCPU));
  return to;
}

}  // namespace

StatusOr<Weight> Weight::slice_cols(int64_t begin, int64_t end, Allocator& alloc) const {
  if (device() != DeviceType::kCPU) return unsupported("column slices are taken of host weights");
  if (begin < 0 || end > cols() || begin >= end) {
    return out_of_range("columns [" + std::to_string(begin) + ", " + std::to_string(end) + ") of a " +
                        std::to_string(cols()) + "-column weight");
  }
  const int pack = dtype() == DataType::kINT4 ? 2 : 1;  // weights per element of `values`
  if (begin % pack != 0 || end % pack != 0) return unsupported("int4 columns are sliced in pairs");
  Weight part{Tensor(), Tensor(), group_size, Tensor()};
  KUIPER_ASSIGN_OR_RETURN(part.values, copy_columns(values, begin / pack, end / pack, alloc));
  if (group_size <= 0) return part;
  if (cols() % group_size != 0 || begin % group_size != 0 || end % group_size != 0) {
    return unsupported("columns [" + std::to_string(begin) + ", " + std::to_string(end) + ") of a " +
                       std::to_string(cols()) + "-column weight in groups of " + std::to_string(group_size) +
                       " do not begin and end on group boundaries of every row");
  }
  const int64_t groups_per_row = cols() / group_size;
  for (auto [from, to] : {std::pair{&scales, &part.scales}, {&mins, &part.mins}}) {
    if (from->is_empty()) continue;
    KUIPER_ASSIGN_OR_RETURN(Tensor per_row, from->reshape({rows(), groups_per_row}));
    KUIPER_ASSIGN_OR_RETURN(Tensor sliced, copy_columns(per_row, begin / group_size, end / group_size, alloc));
    KUIPER_ASSIGN_OR_RETURN(*to, sliced.reshape({sliced.numel()}));
  }
  return part;
}

}  // namespace kuiper::op
