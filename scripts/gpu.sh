#!/usr/bin/env bash
# The GPU tier in one call (run on the device machine from the repo root): environment, GPU tests,
# benchmarks. Writes JSON and logs under $OUT (default ./out). Uses the package from the tree.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
# The device machine has no package index: pure-Python wheels it lacks travel in .whl (see README).
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=.:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# A newer Triton carried in parts (scripts/triton_parts.sh): TRITON_PARTS=/tmp/tw unpacks it once into
# /tmp/triton-carried and puts it first on the path (the machine's own Triton stays for everything else).
if [ -n "${TRITON_PARTS:-}" ]; then
  if [ ! -d /tmp/triton-carried/triton ]; then
    mkdir -p /tmp/triton-carried && cat "$TRITON_PARTS"/part_* | tar xJ -C /tmp/triton-carried
  fi
  export PYTHONPATH=/tmp/triton-carried:$PYTHONPATH TRITON_DEFAULT_FP_FUSION=1
fi
export WARPLOOM_CACHE_DIR=${WARPLOOM_CACHE_DIR:-/tmp/warploom-cache}
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" \
  | tee "$OUT/env.txt"
what=${1:-all}
# One sweep per shape, each with its own variants: `sweep_each NAME 'case|MxNxK|variants' ...` writes
# $OUT/NAME-case-MxNxK.json per spec and one $OUT/NAME.log.
sweep_each() {
  local name=$1 spec case size variants
  shift
  for spec in "$@"; do
    IFS='|' read -r case size variants <<< "$spec"
    python3 scripts/sweep_plans.py --out "$OUT/$name-$case-$size.json" --cases "$case" --rounds 3 --sizes "$size" \
      --variants "$variants" 2>&1 | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/$name.log"
  done
}
rc=0
if [ "$what" = all ] || [ "$what" = test ]; then
  # TEST_FILES narrows the run (a call is limited to 10 minutes: under a carried Triton, whose first compiles are
  # cold, run the tier in halves, e.g. TEST_FILES="$(ls tests/gpu/test_*.py | head -12)").
  python3 -m pytest -q -x -p no:cacheprovider ${TEST_FILES:-tests/gpu} --junitxml="$OUT/gpu-tests.xml" -o addopts="" \
    2>&1 | tail -n 40 | tee "$OUT/gpu-tests.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = all ] || [ "$what" = profile ]; then
  python3 scripts/profile_host.py 2>&1 | head -n 60 | tee "$OUT/profile.log"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  python3 -m warploom.bench --out "$OUT/bench.json" ${BENCH_SIZES:+--sizes $BENCH_SIZES} 2>&1 | tee "$OUT/bench.log"
fi
if [ "$what" = all ] || [ "$what" = suite ]; then
  # warploom bench: the quick suite against torch, as JSON, a plot and a markdown section.
  python3 -m warploom bench --suite quick --out "$OUT/suite.json" --plot "$OUT/suite.png" \
    --markdown "$OUT/suite.md" 2>&1 | tee "$OUT/suite.log"
fi
if [ "$what" = all ] || [ "$what" = epilogue ]; then
  # Fused scaled_mm + bias + gelu + residual vs torch eager and torch.compile (minutes of autotuning).
  python3 scripts/bench_epilogue.py --out "$OUT/epilogue.json" 2>&1 | grep -v "^  triton_mm\|^AUTOTUNE\|^strides\|^dtypes" \
    | tee "$OUT/epilogue.log"
fi
if [ "$what" = blockwise ]; then
  # Blockwise fp8 (issue 5): its GPU tests, then the benchmark against torch's blockwise kernel.
  python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_blockwise_gpu.py -o addopts="" 2>&1 | tail -n 30 \
    | tee "$OUT/blockwise-tests.log"
  rc=${PIPESTATUS[0]}
  python3 scripts/bench_blockwise.py --out "$OUT/blockwise.json" ${BLOCKWISE_ARGS:---plans --ablation} 2>&1 \
    | tee "$OUT/blockwise.log"
fi
if [ "$what" = tail ]; then
  # A split-K tail (rule 15, issue 6 item 3): its GPU tests, then tail variants against none at the shapes
  # wave quantization hurts (TAIL_SIZES), all four ops, against torch in the same run.
  python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_tail_split_gpu.py -o addopts="" 2>&1 | tail -n 30 \
    | tee "$OUT/tail-tests.log"
  rc=${PIPESTATUS[0]}
  python3 scripts/sweep_plans.py --variants tail --sizes ${TAIL_SIZES:-4096x2112x7168} --rounds 3 \
    --cases bf16,fp8,fp8-exact,blockwise --out "$OUT/tail.json" 2>&1 | tee "$OUT/tail.log"
fi
if [ "$what" = waves ]; then
  # Is blockwise 4096x2112x7168's 0.81x wave quantization? (archive/exp/waves.py; yes: session 14 in
  # docs/history/benchmarks-2026-11.md)
  python3 archive/exp/waves.py 2>&1 | tee "$OUT/waves.log"
fi
if [ "$what" = hostparts ]; then
  # An eager call's host time, layer by layer (issue 6: <= 10 us over the kernel; archive/exp/host_parts.py).
  python3 archive/exp/host_parts.py 2>&1 | tee "$OUT/host-parts.log"
fi
if [ "$what" = areg ]; then
  # Decode with A from registers and a ring of B alone (archive/exp/decode_areg.py; hand-written probe, not built in).
  python3 archive/exp/decode_areg.py 2>&1 | tee "$OUT/decode-areg.log"
fi
if [ "$what" = swap ]; then
  # Decode probes (session 17): swap-AB (archive/exp/decode_swap.py) at N = K = 8192 and at Llama-3 shapes, then
  # rule 16's kernel loading only the A rows that exist (archive/exp/decode_a_rows.py).
  python3 archive/exp/decode_a_rows.py 2>&1 | tee "$OUT/decode-a-rows.log"
  python3 archive/exp/decode_swap.py --nk 8192x8192,4096x4096,4096x14336 --m 1,16 2>&1 | tee "$OUT/decode-swap.log"
fi
if [ "$what" = swapab ]; then
  # Rule 18 (swap-AB decode): its GPU tests, then the planner's kernel against the unswapped plan (swap_ab false)
  # and swapped 128-row tiles, and torch, at Llama-3 and 8192-square decode shapes (SWAP_SIZES), bf16 and fp8
  # rowwise, interleaved rounds.
  python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_swap_gpu.py -o addopts="" 2>&1 | tail -n 30 \
    | tee "$OUT/swap-tests.log"
  rc=${PIPESTATUS[0]}
  variants=${SWAP_VARIANTS:-'[{}, {"swap_ab": false}, {"swap_ab": true, "bm": 128}]'}
  python3 scripts/sweep_plans.py --variants "$variants" \
    --cases bf16,fp8 --rounds 5 \
    --sizes ${SWAP_SIZES:-1x4096x4096,16x4096x4096,16x14336x4096,1x4096x14336,16x4096x14336,1x8192x8192,16x8192x8192,16x9216x8192,8x28672x4096,16x28672x4096} \
    --out "$OUT/swap.json" 2>&1 | tee "$OUT/swap.log"
fi
if [ "$what" = grouped ]; then
  # Grouped GEMMs (issue 27): their GPU tests (torch._grouped_mm / _scaled_grouped_mm, masked, CUDA graphs with
  # changed offsets), then the benchmark against torch's grouped ops on three MoE shapes (GROUPED_ARGS).
  python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_grouped_gpu.py -o addopts="" 2>&1 | tail -n 30 \
    | tee "$OUT/grouped-tests.log"
  rc=${PIPESTATUS[0]}
  python3 scripts/bench_grouped.py --out "$OUT/grouped.json" ${GROUPED_ARGS:-} 2>&1 | tee "$OUT/grouped.log"
  # Masked decode (64 rows of capacity an expert) against a copy's bandwidth, and the grouped plans side by side
  # (the planner's against forced variants, torch, a loop of torch.mm and the dense GEMM; counts ragged and aligned).
  python3 scripts/bench_grouped.py --out "$OUT/grouped-masked.json" --kinds masked,masked-fp8 \
    --shapes "${MASKED_SHAPES:-8x512x4096x7168,32x2048x4096x7168,8x512x7168x2048,32x2048x7168x2048}" 2>&1 \
    | tee "$OUT/grouped-masked.log"
  python3 scripts/sweep_grouped.py --out "$OUT/sweep-grouped.json" --align 1,128 ${SWEEP_GROUPED_ARGS:-} 2>&1 \
    | tee "$OUT/sweep-grouped.log"
  # fp8 rowwise, promoted and fast accumulation (issue 27: >= 1.2x torch._scaled_grouped_mm), against torch's and the
  # dense fp8 kernel on the same rows; then stream-K, forced at planning (the planner keeps fp8 stream-K tiles 128
  # wide, which a Plan field replaced on its 128x256 plan would not).
  python3 scripts/sweep_grouped.py --out "$OUT/sweep-grouped-fp8.json" --case fp8,fp8-fast ${SWEEP_GROUPED_FP8_ARGS:-} \
    2>&1 | tee "$OUT/sweep-grouped-fp8.log"
  python3 scripts/sweep_grouped.py --out "$OUT/sweep-grouped-fp8-sk.json" --case fp8,fp8-fast \
    --forced '{"stream_k": 2}' --variants '[{}, {"stream_k": 4}]' 2>&1 | tee "$OUT/sweep-grouped-fp8-sk.log"
  # Masked decode against a copy's bandwidth, whole tiles against stream-K's pieces evening out the last round; bf16,
  # then fp8 with fast accumulation (bench_grouped's masked-fp8: 0.85-0.89 of a copy's at 8 experts, the target 0.9).
  masked_shapes=${MASKED_SHAPES:-8x512x4096x7168,32x2048x4096x7168,8x512x7168x2048}
  masked_variants='[{}, {"bn": 64}, {"bn": 256}, {"bm": 128}, {"bm": 128, "stream_k": 2}, {"bm": 128, "stream_k": 4}]'
  python3 scripts/sweep_grouped.py --out "$OUT/sweep-masked.json" --masked --shapes "$masked_shapes" \
    --variants "$masked_variants" 2>&1 | tee "$OUT/sweep-masked.log"
  python3 scripts/sweep_grouped.py --out "$OUT/sweep-masked-fp8.json" --masked --case fp8-fast \
    --shapes "$masked_shapes" --variants "$masked_variants" 2>&1 | tee "$OUT/sweep-masked-fp8.log"
fi
if [ "$what" = moe ]; then
  # A DeepSeek-V3-like MoE FFN forward (issue 27 item 5): warploom's grouped GEMMs against torch's in the same layer,
  # 8 and 32 experts, bf16 and fp8 rowwise (checked against torch's layer) and fp8 blockwise (against the dequantized
  # float layer, torch's per-expert _scaled_mm loop too), then timed as CUDA-graph replays.
  python3 scripts/bench_moe.py --out "$OUT/moe.json" ${MOE_ARGS:-} 2>&1 | tee "$OUT/moe.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = decode ]; then
  # Decode-sized GEMMs (M <= 64, N = K = 8192): tile widths and split-K against torch, as bandwidth.
  python3 scripts/sweep_decode.py --out "$OUT/decode.json" ${DECODE_ARGS:-} 2>&1 | tee "$OUT/decode.log"
fi
if [ "$what" = zoo ]; then
  # The random zoo (issue 23): every op at 224 shapes, eager and CUDA-graph timed, one shard per call
  # (ZOO_SHARD=I/N, default 0/12: 94 cases at an estimated (unmeasured) 3-5 s each, compiles included, so under
  # 10 minutes). The JSON is saved after every case. Merge the shards' JSON on the CPU with
  # warploom bench --merge zoo-*.json --out zoo.json --plot zoo.png --markdown zoo.md
  shard=${ZOO_SHARD:-0/12}
  name="zoo-${shard%/*}-of-${shard#*/}"
  python3 -m warploom bench --suite zoo --graph --shard "$shard" --out "$OUT/$name.json" --plot "$OUT/$name.png" \
    --markdown "$OUT/$name.md" 2>&1 | tee "$OUT/$name.log"
fi
if [ "$what" = sanitize ]; then
  # compute-sanitizer over one kernel per recipe and schedule family (scripts/sanitize.py; issue 28), and over the
  # control kernels (scripts/sanitize_control.py: Gluon with no warploom schedule) that show which reports the tools
  # give correct warp-specialized kernels; scripts/sanitize_triage.py then sorts every report by the source lines it
  # names and fails on any the controls do not explain (sanitize.md). Each run is its own process,
  # SANITIZE_JOBS at once (default 8: the GPU is mostly idle under a sanitizer); SANITIZE_TOOLS and SANITIZE_CASES
  # narrow the sweep. sanitize.tsv has (case, tool, exit code: 0 clean and right, 1 a wrong result, 99 a report).
  # API errors a program handles are not reported: Triton >= 3.7 probes oversized shared memory with a
  # cuFuncSetAttribute that fails on sm_90 and falls back (its driver.c), which memcheck would count in every case.
  : > "$OUT/sanitize.tsv"
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    for c in warp_specialize cp_async_mbarrier store_mbarrier; do echo "$tool control $c"; done
    for c in ${SANITIZE_CASES:-$(python3 scripts/sanitize.py --list)}; do echo "$tool sanitize $c"; done
  done | OUT="$OUT" xargs -P "${SANITIZE_JOBS:-8}" -L 1 bash -c '
    if [ "$1" = control ]; then run="scripts/sanitize_control.py $2"; else run="scripts/sanitize.py --case $2"; fi
    timeout 300 compute-sanitizer --tool "$0" --report-api-errors no --print-limit 100000 --error-exitcode 99 \
      python3 $run > "$OUT/$1-$0-$2.log" 2>&1
    code=$?
    [ "$1" = control ] || printf "%s\t%s\t%s\n" "$2" "$0" "$code" >> "$OUT/sanitize.tsv"'
  python3 scripts/sanitize_triage.py "$OUT" --markdown "$OUT/sanitize.md" | tee "$OUT/sanitize-triage.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = splitk ]; then
  # Rule 25 (split-K for a few tiles over a long K): split-K's GPU tests (unequal ranges included), then the planner's
  # plan against no split (stream-K or rule 23's 64x64, as the planner falls back) at zoo shapes it splits, bf16 and
  # fp8 rowwise fast. SPLITK_SIZES overrides the shapes.
  python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_split_k_gpu.py -o addopts="" 2>&1 | tail -n 30 \
    | tee "$OUT/splitk-tests.log"
  rc=${PIPESTATUS[0]}
  python3 scripts/sweep_plans.py --out "$OUT/splitk.json" --cases bf16,fp8 --rounds 3 \
    --variants '[{}, {"split_k": 1}, {"bm": 64, "bn": 64, "stages": 8}]' \
    --sizes "${SPLITK_SIZES:-192x448x14496,268x112x4944,1888x224x15088,128x2112x7168,128x4096x7168,469x96x4928}" \
    2>&1 | tee "$OUT/splitk.log"
  # Between a quarter and a half of the SMs' tiles rule 25 splits in 2-3 ranges (session 28): both against its plan.
  python3 scripts/sweep_plans.py --out "$OUT/splitk-mid.json" --cases bf16,fp8 --rounds 3 \
    --variants '[{}, {"bm": 128, "bn": 128, "split_k": 2}, {"bm": 128, "bn": 128, "split_k": 3}]' \
    --sizes "${SPLITK_MID_SIZES:-2416x160x14368,112x5264x3472,1440x1408x7168}" 2>&1 | tee "$OUT/splitk-mid.log"
  # Rule 25 at decode sizes (`decode_split`): 64x64 units in k-ranges against the whole swapped or 64-row tiles.
  python3 scripts/sweep_plans.py --out "$OUT/splitk-decode.json" --cases bf16,fp8 --rounds 5 \
    --variants '[{}, {"split_k": 1}, {"swap_ab": true}, {"split_k": 4}, {"split_k": 6}, {"split_k": 8}]' \
    --sizes "${SPLITK_DECODE_SIZES:-8x104x5248,43x88x7968,2x104x1488,21x96x3984,4x816x10400,1x816x2272,11x1408x3456,64x2112x7168,8x112x9344,16x128x8192}" \
    2>&1 | tee "$OUT/splitk-decode.log"
fi
if [ "$what" = large ]; then
  # The large shapes below issue 24's floor (session 28's full suite: 0.92-0.93 of torch), the planner's plan
  # against ping-pong consumers (one warpgroup's epilogue beside the other's mainloop: short K) and stream-K.
  python3 scripts/sweep_plans.py --out "$OUT/large.json" --cases bf16,fp8 --rounds 5 \
    --variants '[{}, {"pingpong": true}, {"stream_k": 2}, {"bn": 256, "stream_k": 2}, {"bn": 256, "tail_split": 2}]' \
    --sizes "${LARGE_SIZES:-2048x2048x2048,4096x7168x2048,4096x2112x7168}" 2>&1 | tee "$OUT/large.log"
  # Ping-pong against the planner's cooperative plan at the zoo's short-K shapes of at least a wave of 128x128 tiles.
  python3 scripts/sweep_plans.py --out "$OUT/pingpong.json" --cases fp8,bf16 --rounds 5 \
    --variants '[{}, {"pingpong": true}]' \
    --sizes "${PINGPONG_SIZES:-917x5184x608,1064x5696x1168,4756x2688x1840,2986x6384x2224,1161x12624x2176,4096x4096x2048,8192x8192x1024,8192x4096x1536,14242x3888x3264}" \
    2>&1 | tee "$OUT/pingpong.log"
fi
if [ "$what" = quantize ]; then
  # Fused fp8 quantization (issue 27 item 3; rules 26, 27 and 29): its GPU tests, then the rowwise benchmark in one
  # run with CUDA graphs: fused against the warploom GEMM + torch's amax and cast and torch.mm + the same, at N in
  # 128..7168, M in 128..8192, K 2048 and 7168, bf16 and fp8 rowwise (QUANTIZE_ARGS narrows it, e.g. "--cases bf16
  # --k 2048 --no-variants"). The issue's target: fused >= 1.3x the GEMM followed by torch's amax and cast.
  python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_quantize_epilogue_gpu.py -o addopts="" 2>&1 \
    | tail -n 30 | tee "$OUT/quantize-tests.log"
  rc=${PIPESTATUS[0]}
  python3 scripts/bench_quantize.py --out "$OUT/quantize.json" ${QUANTIZE_ARGS:-} 2>&1 | tee "$OUT/quantize.log"
fi
if [ "$what" = skwaves ]; then
  # Stream-K with a whole wave joining the shared tiles (ir.Tiling.sk_waves, forced only; issue 23): the planner's plan
  # against classic stream-K and sk_waves=1 (128x256 and 128x128) at zoo shapes whose tiles fill just over whole waves
  # (685x6136x1680: 144 tiles of 128x256, 0.60x torch in session 29's zoo). SKWAVES_SIZES overrides the shapes.
  python3 scripts/sweep_plans.py --out "$OUT/skwaves.json" --cases bf16,fp8 --rounds 3 \
    --variants '[{}, {"stream_k": 2, "cluster": 1, "tail_split": 1}, {"stream_k": 2, "sk_waves": 1, "cluster": 1, "tail_split": 1}, {"bn": 128, "stream_k": 2, "sk_waves": 1, "cluster": 1, "tail_split": 1}]' \
    --sizes "${SKWAVES_SIZES:-685x6136x1680,1256x1720x11240,1057x2048x7112,342x13104x424,1232x7496x720,7206x1200x1008,676x8712x248}" \
    2>&1 | tee "$OUT/skwaves.log"
fi
if [ "$what" = rule24 ]; then
  # Rule 24 side by side (issue 23): the planner's plan against one CTA per tile at the zoo shapes where it plans
  # clusters and the session-25 zoo run (docs/benchmarks.md) suggests a miss or a gain. Needs Triton >= 3.7
  # (TRITON_PARTS). RULE24_SIZES overrides the shapes.
  python3 scripts/sweep_plans.py --out "$OUT/rule24.json" --cases bf16,fp8 --variants '[{}, {"cluster": 1}]' \
    --sizes "${RULE24_SIZES:-1072x5728x80,14215x528x192,8666x816x160,917x5184x608,685x6144x1680,1232x7504x720,9162x2912x640,4634x4976x3680,5344x2192x144}" \
    2>&1 | tee "$OUT/rule24.log"
fi
if [ "$what" = clusters ]; then
  # Rule 24's cluster forms side by side (scripts/sweep_plans.py --variants clusters): the planner's plan, one CTA per
  # tile, 2x1 sharing B and 1x2 sharing A, ping-pong in one CTA and in 2x1 clusters (bf16, fp8 rowwise fast; issue
  # 24: rule 30's unaligned shapes 1064x5696x1168,4756x2688x1840 through CLUSTER_SIZES), and 2x1 for promoted fp8,
  # blockwise fp8 and
  # fused epilogues, which the planner clusters only when forced until this measures them. Shapes: unaligned rows
  # both sides (4634x4968x3672), only A's rows unaligned (14312x1920x688, where 2x1 won in session 25), tall with
  # few columns and A unaligned (16384x1024x3672: A's traffic dominates), aligned blockwise-sized (4096x7168x7168).
  # Needs Triton >= 3.7 (TRITON_PARTS). CLUSTER_SIZES overrides the shapes.
  python3 scripts/sweep_plans.py --out "$OUT/clusters.json" --variants clusters --rounds 3 \
    --cases bf16,fp8,fp8-exact,blockwise,bf16-gelu,fp8-gelu \
    --sizes "${CLUSTER_SIZES:-4634x4968x3672,14312x1920x688,16384x1024x3672,4096x7168x7168}" \
    2>&1 | tee "$OUT/clusters.log"
fi
if [ "$what" = longk ]; then
  # Rule 3's long-K regime (16-bit operands, >= 96 k-blocks; docs/decisions/rule-03-tile-wave-score.md): the
  # planner's plan against 128x128 (as planned before session 30), 128x256 whole tiles, rule 17's 256x128 and a 2x1
  # cluster (Triton >= 3.7: TRITON_PARTS; the cluster variant is refused and reported under 3.6). LONGK_SIZES
  # overrides the shapes.
  python3 scripts/sweep_plans.py --out "$OUT/longk.json" --cases bf16 --rounds 3 \
    --variants '[{}, {"bm": 128, "bn": 128}, {"bm": 128, "bn": 256, "stream_k": 0, "tail_split": 1}, {"bm": 256, "bn": 128}, {"cluster": 2}]' \
    --sizes "${LONGK_SIZES:-12108x160x14264,1256x1720x11240,1057x2048x7112,168x8424x12040,10837x360x8728,6097x1560x13680,2007x2008x12112}" \
    2>&1 | tee "$OUT/longk.log"
fi
if [ "$what" = smallsplit ]; then
  # Split-K for the zoo's few-tile bf16 shapes over a long K, where rule 23's 64x64 tiles leave most SMs idle
  # (122x712x7784: 24 CTAs, 0.52x torch in session 30's zoo): 64x64 and 128x128 tiles split in k-ranges against the
  # planner's plan. One sweep per shape (each has its own split counts).
  sweep_each smallsplit \
    'bf16|122x712x7784|[{}, {"bm": 64, "bn": 64, "split_k": 4}, {"bm": 64, "bn": 64, "split_k": 5}, {"bm": 128, "bn": 128, "split_k": 8}]' \
    'bf16|459x112x2632|[{}, {"bm": 128, "bn": 128, "split_k": 7}, {"bm": 64, "bn": 64, "split_k": 6}]' \
    'bf16|513x368x5160|[{}, {"bm": 64, "bn": 64, "split_k": 2}, {"bm": 128, "bn": 128, "split_k": 6}]' \
    'bf16|1895x136x3704|[{}, {"bm": 128, "bn": 128, "split_k": 2}]'
fi
if [ "$what" = split64 ]; then
  # Rule 25's 64x64 split-K (session 31): the zoo's and rule 25's measured shapes whose plan it changed, the planner's
  # plan ({}) against the other count or plan measured there, bf16 then fp8 rowwise (fast accumulation). (Session 31
  # ran the 64x64 whole baselines at 6 stages; rule 23's plan has 8, as forced here now.)
  sweep_each split64 'bf16|191x440x14336|[{}, {"bm": 128, "bn": 128, "split_k": 8}]' \
      'bf16|268x112x4096|[{}, {"bm": 128, "bn": 128, "split_k": 8}]' \
      'bf16|73x104x3280|[{}, {"bm": 64, "bn": 64, "stages": 8, "split_k": 1}]' \
      'bf16|469x88x4920|[{}, {"bm": 64, "bn": 64, "split_k": 5}]' \
      'bf16|268x112x4944|[{}, {"bm": 64, "bn": 64, "split_k": 6}]' \
      'bf16|325x96x10232|[{}, {"bm": 64, "bn": 64, "split_k": 7}]' \
      'bf16|80x576x3552|[{}, {"bm": 64, "bn": 64, "split_k": 4}, {"bm": 64, "bn": 64, "stages": 8, "split_k": 1}]' \
      'bf16|191x440x14496|[{}, {"bm": 64, "bn": 64, "split_k": 4}]' \
      'fp8|469x96x4928|[{}, {"bm": 64, "bn": 64, "split_k": 5}]' \
      'fp8|268x112x4944|[{}, {"bm": 64, "bn": 64, "split_k": 5}]' \
      'fp8|325x96x10240|[{}, {"bm": 64, "bn": 64, "split_k": 6}]' \
      'fp8|192x448x14496|[{}, {"bm": 64, "bn": 64, "split_k": 4}]'
fi
if [ "$what" = clusterlongk ]; then
  # Rule 24 under a whole wave at a long K (session 31; Triton >= 3.7): the planner's clusters against one CTA a tile.
  sweep_each clusterlongk 'bf16|527x4680x6416|[{}, {"cluster": 1}]' 'bf16|12108x160x14264|[{}, {"cluster": 1}]' \
    'bf16|1057x2048x7112|[{}, {"cluster": 1}]'
fi
if [ "$what" = narrow ]; then
  # Issue 23's worst zoo shapes that no rule has moved yet: narrow N over a tall M (one wave of 128x128 tiles with most
  # of each tile's columns empty), and 917x5184x600 (168 tiles of 128x256): the planner's plan against the menu's
  # other tiles and a 2-range split (session 31, exploratory).
  sweep_each narrow 'bf16|10050x80x1280|[{}, {"bm": 64, "bn": 128}, {"bm": 128, "bn": 128, "split_k": 2}]' \
    'bf16|5600x264x1160|[{}, {"bm": 64, "bn": 128}, {"bm": 128, "bn": 128, "split_k": 2}]' \
    'bf16|1806x88x1672|[{}, {"bm": 64, "bn": 128}, {"bm": 128, "bn": 128}]' \
    'bf16|917x5184x600|[{}, {"bm": 256, "bn": 128}, {"bm": 128, "bn": 128, "stream_k": 2}]'
fi
if [ "$what" = narrow31 ]; then
  # Rule 31's narrow tiles (session 32): the planner's narrow plan ({}) against the same tile whole (n_blocks=[]) at
  # the shapes the rule changes, then, exploratory, narrow 256-wide tiles against the planner's plan where N is over
  # 128 (two 128-wide tiles along N today) or the plan is rule 23's 64x64.
  whole='{"plan": {"n_blocks": []}}'
  sweep_each narrow31 "bf16|10050x80x1280|[{}, $whole]" "bf16|13332x72x5120|[{}, $whole]" \
    "bf16|10047x176x72|[{}, $whole]" "bf16|12108x160x14264|[{}, $whole]" "fp8|10050x80x1280|[{}, $whole]" \
    "fp8|13332x80x5120|[{}, $whole]" \
    'bf16|3794x152x1440|[{}, {"bm": 64, "bn": 256, "plan": {"n_blocks": [128, 32]}}, {"bm": 128, "bn": 256, "plan": {"n_blocks": [128, 32]}}]' \
    "bf16|4990x144x7856|[{}, $whole, {\"bm\": 64, \"bn\": 256, \"plan\": {\"n_blocks\": [128, 16]}}]" \
    'bf16|2090x96x7792|[{}, {"bm": 64, "bn": 128, "split_k": 4, "plan": {"n_blocks": [64, 32]}}]' \
    'bf16|1895x136x3704|[{}, {"bm": 64, "bn": 256, "plan": {"n_blocks": [128, 16]}}]'
fi
if [ "$what" = narrowcluster ]; then
  # Is a narrow N over a tall M bound by the bytes each SM's TMA copies rather than by its tensor cores (session 32:
  # rule 31's narrow wgmma gained 0.4-2.6%; cuBLAS runs 10050x80x1280 in 1x4 clusters, which multicast B)? The
  # planner's plan against 2-CTA clusters along M, which multicast B: rule 24's cooperative 128x256 cluster tile
  # (spending 3.2x the wgmma work at N = 80) and its ping-pong 128x128 one; along N for 3794x152x1440 (Triton >= 3.7:
  # TRITON_PARTS).
  sweep_each narrowcluster 'bf16|10050x80x1280|[{}, {"cluster": 2}, {"cluster": 2, "pingpong": true}]' \
    'bf16|13332x72x5120|[{}, {"cluster": 2}, {"cluster": 2, "pingpong": true}]' \
    'bf16|3794x152x1440|[{}, {"cluster": 2}, {"cluster": "1x2"}]' \
    'fp8|10050x80x1280|[{}, {"cluster": 2}, {"cluster": 2, "pingpong": true}]'
fi
if [ "$what" = narrowsplit ]; then
  # 64-row tiles in split-K ranges at narrow N over a long K, the shape of cuBLAS's choices there (session 32: 2090x96x7792
  # ran 0.829 as 64x128 in 4 ranges with narrow blocks against the planned 64x64's 0.652, without this baseline): the
  # planner's plan, then the same 64-row split whole and narrow (n_blocks). Each split count fills about one wave.
  sweep_each narrowsplit \
    'bf16|2090x96x7792|[{}, {"bm": 64, "bn": 128, "split_k": 4, "n_blocks": []}, {"bm": 64, "bn": 128, "split_k": 4, "n_blocks": [64, 32]}]' \
    'bf16|2986x112x3728|[{}, {"bm": 64, "bn": 128, "split_k": 2, "n_blocks": []}, {"bm": 64, "bn": 128, "split_k": 2, "n_blocks": [64, 32, 16]}]' \
    'bf16|1895x136x3704|[{}, {"bm": 64, "bn": 256, "split_k": 4, "n_blocks": []}, {"bm": 64, "bn": 256, "split_k": 4, "n_blocks": [128, 16]}]' \
    'bf16|2415x160x14360|[{}, {"bm": 64, "bn": 256, "split_k": 3, "n_blocks": []}, {"bm": 64, "bn": 256, "split_k": 3, "n_blocks": [128, 32]}]' \
    'bf16|3794x152x1440|[{}, {"bm": 64, "bn": 256, "split_k": 2, "n_blocks": []}, {"bm": 64, "bn": 256, "split_k": 2, "n_blocks": [128, 32]}]' \
    'bf16|469x88x4920|[{}, {"bm": 64, "bn": 128, "split_k": 8, "n_blocks": []}, {"bm": 64, "bn": 128, "split_k": 8, "n_blocks": [64, 32]}]'
fi
if [ "$what" = fitted ]; then
  # Rule 32's fitted tiles (session 33): the planner's plan ({}) against the plan before the rule (the 128x256 tile it
  # replaced, planned as before: whole, stream-K or, under Triton >= 3.7, rule 24's 2-CTA cluster). FITTED_SIZES
  # overrides the shapes; under TRITON_PARTS (3.9.0) this is the first measurement against clusters.
  python3 scripts/sweep_plans.py --out "$OUT/fitted.json" --cases bf16 --rounds 3 --variants '[{}, {"bm": 128, "bn": 256}]' \
    --sizes "${FITTED_SIZES:-1679x2456x2000,3838x576x2768,3097x920x2920,1253x2024x688,3000x3000x3000,1536x1536x1536,685x6136x1680,656x8048x5280,14215x520x184,385x5904x192}" \
    2>&1 | grep -v "nanobind\|leaked\|^ - " | tee "$OUT/fitted.log"
fi
if [ "$what" = fitlongk ]; then
  # Rule 32 at a long K (session 34): forced fitted tiles that keep the plan's rounds (or cut them), against the
  # planner's plan, at the zoo's long-K shapes, aligned (K a multiple of 64) and not.
  sweep_each fitlongk \
    'bf16|1256x1720x11200|[{}, {"bm": 128, "bn": 256, "n_blocks": [128, 16]}, {"bm": 192, "bn": 128, "n_blocks": [64, 32]}]' \
    'bf16|1256x1720x11240|[{}, {"bm": 128, "bn": 256, "n_blocks": [128, 16]}]' \
    'bf16|3841x840x4816|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 16]}, {"bm": 128, "bn": 256, "n_blocks": [128, 64, 32]}]' \
    'bf16|6097x1560x13680|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64, 16]}]' \
    'bf16|527x4680x6416|[{}, {"bm": 192, "bn": 128, "n_blocks": [64, 32, 16]}]' \
    'bf16|4619x2064x13392|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64, 16]}]' \
    'bf16|428x9016x5832|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64, 16]}, {"bm": 128, "bn": 256, "tail_split": 1, "n_blocks": [128, 64, 16]}]'
fi
if [ "$what" = l2floor ]; then
  # Rule 32's L2 floor (session 34): the zoo's bf16 shapes whose plan it changed, the planner's plan ({}) against the
  # plan before it, forced.
  sweep_each l2floor \
    'bf16|13930x480x4328|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|276x7224x1040|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": [128, 32, 16]}]' \
    'bf16|1477x744x7464|[{}, {"bm": 128, "bn": 256, "stream_k": 3, "n_blocks": []}]' \
    'bf16|270x7168x256|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": [128, 32, 16]}]' \
    'bf16|10837x360x8728|[{}, {"bm": 256, "bn": 128, "stream_k": 0, "n_blocks": []}]' \
    'bf16|527x4680x6416|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|6097x1560x13680|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|1867x10448x14768|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|119x10568x13848|[{}, {"bm": 128, "bn": 256, "stream_k": 3, "n_blocks": []}]' \
    'bf16|2637x1904x6464|[{}, {"bm": 128, "bn": 256, "stream_k": 3, "n_blocks": []}]' \
    'bf16|203x5528x5272|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": [128, 16]}]' \
    'bf16|1029x14960x4536|[{}, {"bm": 128, "bn": 256, "stream_k": 4, "n_blocks": []}]' \
    'bf16|1712x15576x4728|[{}, {"bm": 128, "bn": 256, "stream_k": 2, "n_blocks": []}]' \
    'bf16|3841x840x4816|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|168x8424x12040|[{}, {"bm": 128, "bn": 256, "stream_k": 2, "n_blocks": []}]' \
    'bf16|4619x2064x13392|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|12209x2152x10808|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|265x10920x14120|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|3601x10144x7064|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|15493x1664x4296|[{}, {"bm": 128, "bn": 256, "stream_k": 2, "n_blocks": []}]'
fi
if [ "$what" = l2large ]; then
  # Rule 32's L2 floor on large aligned shapes (session 34): 192x192 against the 128x256 plan before the floor.
  sweep_each l2large \
    'bf16|4096x10240x8192|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|4096x28672x4096|[{}, {"bm": 128, "bn": 256, "stream_k": 3, "n_blocks": []}]' \
    'bf16|7202x4384x9472|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|1867x10448x14768|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 32]}]' \
    'bf16|203x5528x5272|[{}, {"bm": 128, "bn": 256, "n_blocks": [128, 16]}]'
fi
if [ "$what" = l2unmeasured ]; then
  # Rule 32's L2 floor where session 34 changed a plan without measuring it (the first four are suite or zoo shapes):
  # the planner's plan against the plan before the floor, forced. Under TRITON_PARTS also against rule 24's clusters.
  sweep_each l2unmeasured \
    'bf16|4096x2112x7168|[{}, {"bm": 128, "bn": 256, "n_blocks": []}]' \
    'bf16|4096x57344x8192|[{}, {"bm": 128, "bn": 256, "stream_k": 3, "n_blocks": []}]' \
    'bf16|5699x2888x14160|[{}, {"bm": 128, "bn": 256, "n_blocks": []}]' \
    'bf16|6567x6888x6016|[{}, {"bm": 128, "bn": 256, "stream_k": 0, "n_blocks": []}]' \
    'bf16|1024x2048x4096|[{}, {"bm": 128, "bn": 128, "n_blocks": []}]' \
    'bf16|5000x5000x5000|[{}, {"bm": 128, "bn": 256, "stream_k": 4, "n_blocks": []}]'
fi
if [ "$what" = h200rates ]; then
  # Rule 32's L2 rates on the H200 (session 35): the 7 zoo and suite shapes whose plan they change there, the
  # planner's plan against the H100's plan (forced), in one run.
  sweep_each h200rates \
    'bf16|2637x1904x6464|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64, 32]}]' \
    'bf16|7202x4384x9472|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64]}]' \
    'bf16|6567x6888x6016|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64]}]' \
    'bf16|4096x28672x4096|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64]}]' \
    'bf16|4096x10240x8192|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64]}]' \
    'bf16|4096x57344x8192|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 64]}]' \
    'bf16|4096x2112x7168|[{}, {"bm": 192, "bn": 256, "n_blocks": [128, 32, 16]}]'
fi
if [ "$what" = width8 ]; then
  # Rule 33's narrowest width (session 36): 64x8 (forced; cuBLAS runs it at 141x136x1624) against the planner's 64x16
  # or 64x32 at the shapes where rule 33 measured its largest gains and losses.
  sweep_each width8 \
    'bf16|141x136x1624|[{}, {"bm": 64, "bn": 8}]' 'bf16|366x104x888|[{}, {"bm": 64, "bn": 8}]' \
    'bf16|142x336x1208|[{}, {"bm": 64, "bn": 8}]' 'bf16|547x64x608|[{}, {"bm": 64, "bn": 8}]' \
    'bf16|88x80x560|[{}, {"bm": 64, "bn": 8}]' 'bf16|253x136x104|[{}, {"bm": 64, "bn": 8}]' \
    'bf16|87x640x72|[{}, {"bm": 64, "bn": 8}]' 'bf16|73x104x3280|[{}, {"bm": 64, "bn": 8}, {"bm": 64, "bn": 16}]'
fi
if [ "$what" = ring34fp8 ]; then
  # Rule 34 on fp8 rowwise fast (session 36: measured on bf16 only): the planner's cut ring against the depth before.
  for d in 6:1110x1296x128,118x6288x96,208x3472x64,2606x288x160,6444x224x240 \
           4:114x1200x160,118x832x128,121x112x80,1353x256x80,2255x176x176,270x7168x256,385x5904x192,401x496x320,68x416x336,82x2576x64,93x880x144,97x848x192 \
           12:26x224x240,33x3120x368,48x272x160,8x224x672; do
    python3 scripts/sweep_plans.py --out "$OUT/ring34fp8-${d%%:*}.json" --cases fp8 --rounds 3 --sizes "${d#*:}" \
      --variants "[{}, {\"plan\": {\"stages\": ${d%%:*}}}]" 2>&1 | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/ring34fp8.log"
  done
fi
if [ "$what" = skuneven ]; then
  # Stream-K with uneven pieces (issue 23): large, few-wave zoo shapes, the planner's plan against 128x256 and 128x128
  # tiles shared by all 132 CTAs (sk_waves=1 adds a whole wave to the shared region where the tiles fill one).
  python3 scripts/sweep_plans.py --out "$OUT/skuneven.json" --cases bf16 --rounds 2 \
    --sizes 1256x1720x11240,3097x920x2920,685x6136x1680,917x5184x600,428x9016x5832,405x1424x6576,289x1536x15712,2415x160x14360,1881x224x15080,3841x840x4816,1057x2048x7112,527x4680x6416,4619x1408x1352,4619x2064x13392,168x8424x12040,2577x512x3720,1029x14960x4536,3601x10144x7064 \
    --variants '[{}, {"bm":128,"bn":256,"stream_k":2}, {"bm":128,"bn":256,"stream_k":2,"sk_waves":1}, {"bm":128,"bn":128,"stream_k":2,"sk_waves":1}]' \
    2>&1 | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/skuneven.log"
fi
if [ "$what" = clusterlarge ]; then
  # Issue 23/24: cuBLAS runs every large zoo shape warploom trails in a 2-8 CTA cluster (session 37's profile), nearly
  # all at rows that are not whole 128-byte lines. Rule 24's clusters against one CTA a tile there; run it with
  # TRITON_PARTS (Triton >= 3.7: Hopper TMA multicast), as 3.6.0 refuses the forced clusters.
  python3 scripts/sweep_plans.py --out "$OUT/clusterlarge.json" --cases bf16 --rounds 2 \
    --sizes 1256x1720x11240,3097x920x2920,917x5184x600,428x9016x5832,405x1424x6576,1057x2048x7112,527x4680x6416,4619x1408x1352,1029x14960x4536,3841x840x4816 \
    --variants '[{}, {"cluster":1}, {"cluster":2}, {"cluster":"1x2"}]' \
    2>&1 | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/clusterlarge.log"
fi
if [ "$what" = column36 ]; then
  # Rule 36's open questions (docs/decisions/rule-36-one-column-split.md): fp8 fast on one column of 64-row tiles split
  # in ranges (its k-block is 128 bytes as bf16's: from 8192 of K), 3 ranges (34-44 row blocks), and N of 129-256 in
  # two columns (1024x256x4096 gained 12% on 64x128 in 4 ranges, one shape).
  python3 scripts/sweep_plans.py --out "$OUT/column36-fp8.json" --cases fp8 --rounds 3 \
    --sizes 2048x96x8192,2048x128x8192,4096x128x8192,1024x96x12288 \
    --variants '[{}, {"bm":64,"bn":128,"split_k":2}, {"bm":64,"bn":128,"split_k":4}]' \
    2>&1 | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/column36.log"
  python3 scripts/sweep_plans.py --out "$OUT/column36-bf16.json" --cases bf16 --rounds 3 \
    --sizes 2560x128x7168,2816x96x4096,1024x192x7168,2048x256x4096,1536x256x7168 \
    --variants '[{}, {"bm":64,"bn":128,"split_k":2}, {"bm":64,"bn":128,"split_k":3}, {"bm":64,"bn":128,"split_k":4}]' \
    2>&1 | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/column36.log"
fi
if [ "$what" = fitcluster ]; then
  # Session 38's hand-written fitted tiles inside 2x1 clusters (archive/exp/fitted_cluster, Triton >= 3.7): numbers
  # against fp32, then time against torch, the planner's plan and the one-CTA fitted tile, at the large shapes.
  python3 archive/exp/fitted_cluster/run.py --out "$OUT/fitcluster.json" ${FITCLUSTER_ARGS:-} 2>&1 \
    | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/fitcluster.log"
fi
if [ "$what" = directstore ]; then
  # A small tile's epilogue as masked stores from the registers against the TMA store (archive/exp/direct_store.py):
  # the planner's kernel and its two edited forms, launched alike, against torch (DIRECTSTORE_ARGS: its flags).
  python3 archive/exp/direct_store.py --out "$OUT/directstore.json" ${DIRECTSTORE_ARGS:-} 2>&1 \
    | grep -v "nanobind\|leaked\|^ - " | tee -a "$OUT/directstore.log"
fi
# Everything written under $OUT, packed as one file named to sort first: a device call may hand back only a few files,
# and a sweep writes one a shape.
(cd "$OUT" && tar czf 0-all.tgz --exclude=0-all.tgz . 2>/dev/null)
exit $rc
