#!/usr/bin/env bash
# The H200 ablation of the decode-heavy load and its two nsys profiles, everything off and everything
# on, in one device call. Writes a tarball of the small result files and the logs to $1 (default $OUT).
#   source .device/setup.sh && bash benchmarks/h200_ablate_profile.sh "$OUT"
# Takes at most about 9 minutes on an H200 (the timeouts below). Writes a tarball into DIR; the published
# files are docs/measurements/h200/ablation.json, profile_all_off.json and profile_all_on.json.
set -u
out=${1:-$OUT}
work=/tmp/h200-ablate-profile
rm -rf "$work" && mkdir -p "$work" "$out"
config=configs/llama3-8b-decode.yaml
all_off=(--set engine.process_split=false --set engine.async_output=false --set engine.num_scheduler_steps=1
  --set engine.cuda_graphs=false --set engine.chunked_prefill=false --set engine.prefix_caching=false)
# steps count warm-up too: the windows sit in the main run's decode (16 warm-up requests of 256 tokens
# take ~260 single steps, or ~33 eight-token steps). The all-on profile keeps the engine in the runner's
# process, as the committed profiles do (the split core profiles too: runs/h200/profile_all_on_split.json).
all_on=(--set engine.process_split=false --set engine.async_output=true --set engine.num_scheduler_steps=8
  --set engine.cuda_graphs=true --set engine.chunked_prefill=true --set engine.prefix_caching=true)
timeout 330 python -m llmbench ablate "$config" --out "$work/ablation" 2>&1 | tee "$out/ablate.log" | tail -14
timeout 100 python -m llmbench profile "$config" --nsys --steps 300:310 "${all_off[@]}" --out "$work/profile-all-off" \
  > "$out/profile-all-off.log" 2>&1
timeout 100 python -m llmbench profile "$config" --nsys --steps 45:48 "${all_on[@]}" --out "$work/profile-all-on" \
  > "$out/profile-all-on.log" 2>&1
tail -n 3 "$out/profile-all-off.log" "$out/profile-all-on.log"
cd "$work" && tar czf "$out/h200-ablate-profile.tgz" \
  --exclude='requests.jsonl' --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='trace.json' .
ls -la "$out"
