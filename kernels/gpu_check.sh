#!/usr/bin/env bash
# The GPU conformance run and benchmark, repeatable on any CUDA/ROCm machine
# with torch, triton, numpy and hypothesis:  bash kernels/gpu_check.sh [smoke|full|serving]
#   smoke:   golden vectors for triton and torch, 20 generated problems each, one
#            serving-size problem each, the benchmark.
#   full:    SHARDS x PER_SHARD generated problems for triton (default 16 x 125 = 2000,
#            parallel shards, golden vectors in shard 1), 3 shards for torch, the
#            Triton mutants (python -m nvfp4_suite.vectors bugs --mutants triton), the benchmark
#            (BENCH=0 leaves it out; SHARD_TIMEOUT bounds each shard, default 420 s).
#   serving: the serving-size check for triton and torch (SERVING problems each,
#            default 4), the serving-size benchmark (numpy reference, torch reference
#            on the GPU, kernel), and `pytest -m gpu`.
# Logs go to $OUT (default ./gpu-results).
set -u
mode=${1:-smoke}
out=${OUT:-gpu-results}
mkdir -p "$out"
# The suite installed into the machine's own environment, as a user installs
# it: its ranges accept the numpy, hypothesis, torch and triton there, so pip
# replaces nothing, and no network is needed (--no-deps, --no-build-isolation:
# the machine's setuptools >= 70.1 builds it).
if ! python3 -m pip install -q --no-deps --no-build-isolation -e "$(dirname "$0")/.."; then
  echo "error: cannot install the suite here (pip install --no-deps --no-build-isolation -e . failed; needs setuptools >= 70.1)" >&2
  exit 2
fi
python3 -m pip check 2>&1 | grep -i nvfp4 && { echo "error: the environment does not satisfy the suite's ranges" >&2; exit 2; }
export PYTHONUNBUFFERED=1
# Many shards share the CPU (the references run there): one BLAS/OpenMP thread
# each, or they oversubscribe the cores and stall.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
python3 -c 'import torch, triton, numpy, hypothesis; print("torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__, "hypothesis", hypothesis.__version__, torch.cuda.get_device_name())' | tee "$out/env.txt"
if [ "$mode" = smoke ]; then
  python3 -m nvfp4_suite.vectors check --backend triton --examples 20 --seed 1 > "$out/triton.txt" 2>&1; echo "triton rc=$?" | tee -a "$out/triton.txt"
  python3 -m nvfp4_suite.vectors check --backend torch --examples 20 --seed 1 > "$out/torch.txt" 2>&1; echo "torch rc=$?" | tee -a "$out/torch.txt"
  for b in triton torch; do
    python3 -m nvfp4_suite.vectors check --shape serving --backend $b --examples 1 2>&1 | tee "$out/serving_$b.txt"
  done
  python3 -m nvfp4_suite.kernels.bench 2>&1 | tee "$out/bench.txt"
  exit 0
fi
if [ "$mode" = serving ]; then
  n=${SERVING:-4}
  for b in triton torch; do
    python3 -m nvfp4_suite.vectors check --shape serving --backend $b --examples "$n" > "$out/serving_$b.txt" 2>&1
    echo "serving $b rc=$?" >> "$out/serving_$b.txt"
    tail -n 1 "$out/serving_$b.txt"
  done
  for b in triton torch; do
    python3 -m nvfp4_suite.vectors serving-bench --backend $b --examples 2 2>&1 | tee "$out/serving_bench_$b.txt"
  done
  python3 -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/pytest_gpu.txt" | tail -n 5
  exit 0
fi
shards=${SHARDS:-16}
per=${PER_SHARD:-125}
limit=${SHARD_TIMEOUT:-420}
# Shard 1 of each backend also runs the golden vectors.
golden() { if [ "$1" = 1 ]; then echo ""; else echo "--no-golden"; fi; }
for s in $(seq 1 "$shards"); do
  timeout "$limit" python3 -m nvfp4_suite.vectors check --backend triton --examples "$per" --seed "$s" $(golden "$s") > "$out/tr_$s.log" 2>&1 &
done
for s in $(seq 1 3); do
  timeout "$limit" python3 -m nvfp4_suite.vectors check --backend torch --examples "$per" --seed "$((100 + s))" $(golden "$s") > "$out/to_$s.log" 2>&1 &
done
# The Triton mutants are the registry's (vectors/bugs.py).
for spec in $(python3 -m nvfp4_suite.vectors bugs --mutants triton); do
  timeout "$limit" python3 -m nvfp4_suite.vectors check --backend "$spec" --examples 40 --seed 7 > "$out/mut_${spec##*:}.log" 2>&1 &
done
wait
{ for f in "$out"/tr_*.log; do echo "== $f"; cat "$f"; done; } > "$out/triton_generated.txt"
{ for f in "$out"/to_*.log; do echo "== $f"; cat "$f"; done; } > "$out/torch_generated.txt"
{ for f in "$out"/mut_*.log; do echo "== $f"; grep -E "FAIL vs|CONFORMANT|problems,|raised" "$f" | head -5; done; } > "$out/mutants.txt"
rm -f "$out"/tr_*.log "$out"/to_*.log "$out"/mut_*.log
grep -h "CONFORMANT\|problems, \|golden vectors:" "$out/triton_generated.txt" "$out/torch_generated.txt"
grep -h " FAIL " "$out/triton_generated.txt" "$out/torch_generated.txt" | head -5
cat "$out/mutants.txt"
[ "${BENCH:-1}" = 1 ] && python3 -m nvfp4_suite.kernels.bench --reps 30 2>&1 | tee "$out/bench.txt"
exit 0
