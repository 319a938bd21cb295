# Sourced by the device scripts (tests/gpu/run.sh, bench/gpu/profile_decode.sh): when gpu_bundle/ is
# here (tests/gpu/bundle.sh), sets `bin` to it and puts its libraries and CUDA's own on the loader path —
# the toolkit's, else the pip wheels the machine's Python carries (NCCL ships only as a wheel there).
# Returns 1 when there is no bundle, leaving the environment alone.
gpu_bundle_env() {
  [ -x gpu_bundle/bin/layerpipe ] || return 1
  bin=gpu_bundle/bin
  local cuda_libs=/usr/local/cuda/lib64 pkg d
  for pkg in nccl cublas cuda_runtime; do
    d=$(python3 -c "import nvidia.$pkg as m; print(m.__path__[0] + '/lib')" 2>/dev/null) && cuda_libs="$cuda_libs:$d"
  done
  export LD_LIBRARY_PATH="$PWD/gpu_bundle/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
