# Sourced at the start of a device command: the package as installed (streamcheck + instrument + rules), DeepSpeed
# wheels from .whl (../shared/tools/gpu-wheels .whl VERSION), the NCCL settings the machine asks for, and the
# native hook built once. Usage: DS=0.19.8 . benchmarks/device_setup.sh
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
rm -rf .scpkg && mkdir -p .scpkg && cp -r streamcheck .scpkg/ && cp -r instrument .scpkg/streamcheck/instrument \
  && cp -r rules .scpkg/streamcheck/rules && cp -r scanner .scpkg/streamcheck/scanner
for v in ${DS:-0.19.8}; do
  python3 -m pip install -q --no-index --no-deps --no-compile --target ".site-$v" .whl/deps/*.whl \
    .whl/deepspeed-$v/*.whl >/dev/null 2>&1 || echo "install of deepspeed $v failed"
done
export PYTHONPATH=$PWD/.scpkg:$PWD/.site-${DS%% *}
python3 -P -c 'import time; t=time.time(); from streamcheck.instrument import native
native.load(); print(f"native hook built and loaded in {time.time()-t:.1f} s")'
