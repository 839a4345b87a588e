"""The names of methods and functions the facts pass (extract.py and its parts) gives a meaning: views, metadata,
producers, host-only calls, syncs. Plain tables, no logic."""

# Methods that return a view of (or the same) storage: a write through them writes the base tensor.
VIEW_METHODS = frozenset({
    "narrow", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "t",
    "transpose", "permute", "expand", "expand_as", "as_strided", "select", "detach", "unfold", "movedim",
    "diagonal", "split", "chunk", "unbind", "contiguous",
})

# Attributes that stand for the tensor itself (same storage).
SAME_STORAGE_ATTRS = frozenset({"data"})

# Attributes and methods that only read metadata: no device work, no ordering needed.
METADATA_ATTRS = frozenset({
    "shape", "dtype", "device", "is_cuda", "requires_grad", "ndim", "layout", "is_leaf", "grad_fn", "names",
    "is_sparse", "is_quantized", "is_meta", "__class__",
})
METADATA_METHODS = frozenset({
    "size", "dim", "numel", "nelement", "element_size", "stride", "storage_offset", "data_ptr", "is_contiguous",
    "is_pinned", "get_device", "type", "untyped_storage", "storage", "register_hook", "requires_grad_",
    "retain_grad", "record_stream", "is_floating_point", "is_complex", "__len__", "nbytes", "itemsize",
    "is_shared", "is_set_to", "resize_", "resize_as_", "share_memory_", "requires_grad_", "set_",
})

# Methods and torch functions whose tensor arguments give only shape, dtype and device: no data read.
METADATA_ARG_METHODS = frozenset({"view_as", "expand_as", "reshape_as", "type_as", "new_empty", "new_zeros",
                                  "new_ones", "new_full", "new_tensor", "is_set_to", "size", "stride"})
METADATA_ARG_FUNCTIONS = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
                                    "randint_like", "is_tensor", "is_same_size", "typename", "is_floating_point",
                                    "is_complex", "result_type", "is_storage"})

# torch functions that build a tensor from Python data or host arrays: their arguments are no device tensors.
HOST_DATA_FACTORIES = frozenset({"tensor", "as_tensor", "from_numpy", "frombuffer", "asarray", "Tensor"})

# Tensor methods whose result is new memory written by a kernel on the current stream (a hidden producer). Like
# `float()` of a float tensor, `flatten()` and `contiguous()` return the tensor itself when there is nothing to do;
# `x.permute(...).contiguous()` (DeepSpeed FPDT's q/k/v chunks) is a copy.
PRODUCING_METHODS = frozenset({
    "to", "cuda", "cpu", "clone", "float", "half", "bfloat16", "double", "int", "long", "sum", "mean", "norm",
    "abs", "sqrt", "mul", "add", "sub", "div", "pow", "exp", "softmax", "matmul", "mm", "bmm", "neg", "flatten",
    "contiguous",
})
COPYING_METHODS = frozenset({"to", "cuda", "cpu"})
# torch functions whose result is no data written on a stream: uninitialized memory, metadata, handles.
NOT_PRODUCERS = frozenset({
    "empty", "empty_like", "empty_strided", "tensor", "as_tensor", "from_numpy", "device", "Stream", "Event",
    "is_tensor", "numel", "is_grad_enabled", "get_default_dtype", "Size", "dtype", "Generator", "frombuffer",
    "zeros", "ones", "full", "arange", "rand", "randn", "randint", "linspace", "logspace", "eye", "randperm",
}) | METADATA_ARG_FUNCTIONS

# In-place-looking names that do not write tensor data.
NOT_DATA_WRITES = frozenset({"requires_grad_", "share_memory_", "retain_grad_", "set_", "resize_", "apply_"})

# Plain functions that only look at their arguments on the host.
HOST_ONLY_FUNCTIONS = frozenset({
    "hasattr", "isinstance", "issubclass", "len", "id", "print", "type", "getattr", "setattr", "delattr", "str",
    "repr", "callable", "hash", "format", "sorted", "enumerate", "zip", "iter", "next", "list", "tuple", "set",
    "dict", "frozenset", "super", "vars", "dir", "print_rank_0", "debug_rank0", "log_dist",
    # torch.overrides' dispatch to `__torch_function__` overrides: it hands the call itself (`all_reduce(tensor,
    # op=op, group=group)`) to a subclass, so it is no device op on those arguments (a process group is no tensor)
    "handle_torch_function", "has_torch_function", "has_torch_function_unary", "has_torch_function_variadic",
})
# Methods of loggers and containers: storing or printing a tensor is no device access.
HOST_ONLY_METHODS = frozenset({
    "info", "debug", "warning", "error", "append", "extend", "add", "discard", "remove", "pop", "popleft",
    "appendleft", "get", "setdefault", "index", "count", "keys", "values", "items", "update", "insert",
})

BLOCKING_HOST_METHODS = frozenset({"item", "tolist", "cpu", "numpy"})
# Container methods that store one argument in the receiver (`events.append(event)`, `queue.put(batch)`); with
# `extend` and `setdefault` too, the ones a tensor escapes through into a container (extract_hazards.py).
STORING_METHODS = frozenset({"append", "appendleft", "put", "put_nowait", "add", "insert"})
ESCAPING_METHODS = STORING_METHODS | {"extend", "setdefault"}

# Name parts that say a value is no tensor (a process group, a rank, a stream, a dtype, a device, a count).
NOT_TENSOR_WORDS = ("group", "rank", "world", "stream", "dtype", "device", "factor", "size", "numel", "count")
