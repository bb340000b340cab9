#!/usr/bin/env bash
# The H200 readings of the workload features, on the Llama-3-8B shape with real ShareGPT prompts through
# `llmbench serve` (lengths set by TOKENIZER, a tokenizer.json; the 8B shape has none of its own):
#   poisson32  TPOT at Poisson 32 req/s with every CPU-overhead toggle off vs on: two servers side by
#              side (40 GB of KV each; the idle one does no GPU work), 3 interleaved trials of 300
#              requests each; runs A_k (off) and B_k (on), summarized by ab_summaries.py (~3 min)
#   capacity   the highest Poisson rate at which 95% of requests meet TTFT 500 ms and TPOT 50 ms, on the
#              all-on server, each probe 20 s of arrivals, at most 7 probes (~4 min)
#   multiturn  multi-turn ShareGPT (up to 4 turns, 0.5 s think time, 80 conversations at 8/s) with
#              prefix caching on (A_k) vs off (B_k), two servers side by side, 3 interleaved trials (~3 min)
#   energy     joules per output token, 3 trials each: the throughput workload, and one request at a
#              time (~3 min)
#   warmcache  one all-on server with prefix caching, the same seeded ShareGPT run (300 requests at
#              Poisson 32 req/s) repeated: first on the fresh server (cold), then 3 interleaved rounds
#              of the run as is (A_k: the cache the run before left) and with
#              backend.reset_prefix_cache (B_k: emptied before the trial) (~3 min)
#
#   bash benchmarks/h200_field_runs.sh TOKENIZER OUT_DIR DEST SECTION...
#
# Each section leaves its run directories in OUT_DIR/SECTION (requests.jsonl files over 2 MB dropped) and
# then DEST/SECTION.tgz, so a call cut short by a time limit keeps every section it finished; on SIGTERM
# (`timeout`) the section under way is packed too, with what its runs wrote. Run from the
# checkout's root; its readings go to docs/measurements/h200.md.
set -uo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 TOKENIZER OUT_DIR DEST SECTION... (poisson32 capacity multiturn energy warmcache)" >&2
    exit 2
fi
tokenizer=$(realpath "$1") out=$2 dest=$3
shift 3
[ -f "$tokenizer" ] || { echo "error: $tokenizer: no such file" >&2; exit 2; }
mkdir -p "$out" "$dest"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # benchmarks/ab_summaries.py imports llmbench
llmbench=(python -m llmbench)
sharegpt=(configs/llama3-8b-sharegpt.yaml --set model.tokenizer="$tokenizer" --set workload.dataset.type=sharegpt)
side_by_side=(--set engine.kv_cache_memory_gb=40)
toggles_off=(--set engine.process_split=false --set engine.async_output=false
    --set engine.num_scheduler_steps=1 --set engine.async_scheduling=false)
toggles_on=(--set engine.process_split=true --set engine.async_output=true
    --set engine.num_scheduler_steps=8 --set engine.async_scheduling=true)
client=(--set backend.type=openai --no-report)
servers=()

serve() {  # PORT LOG CONFIG ARGS...: start a server and wait until it answers /health
    local port=$1 log=$2
    shift 2
    "${llmbench[@]}" serve "$@" --port "$port" >"$log" 2>&1 &
    servers+=($!)
    for _ in $(seq 180); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
        sleep 1
    done
    echo "error: the server on port $port did not start; see $log" >&2
    return 1
}

stop_servers() {
    [ ${#servers[@]} -eq 0 ] && return
    kill -INT "${servers[@]}" 2>/dev/null
    for _ in $(seq 20); do
        kill -0 "${servers[@]}" 2>/dev/null || break
        sleep 0.5
    done
    kill -9 "${servers[@]}" 2>/dev/null
    wait "${servers[@]}" 2>/dev/null
    servers=()
}
trap stop_servers EXIT

pack() {  # SECTION
    find "$out/$1" -name requests.jsonl -size +2M -delete
    tar czf "$dest/$1.tgz" -C "$out" "$1"
    echo "$1: $dest/$1.tgz ($(date +%T))"
}

poisson32() {
    local dir=$out/poisson32 k
    serve 8001 "$dir.off.log" "${sharegpt[0]}" --set engine.max_model_len=2048 "${side_by_side[@]}" "${toggles_off[@]}" || return
    serve 8002 "$dir.on.log" "${sharegpt[0]}" --set engine.max_model_len=2048 "${side_by_side[@]}" "${toggles_on[@]}" || return
    for k in 1 2 3; do
        for side in A:8001 B:8002; do
            "${llmbench[@]}" run "${sharegpt[@]}" "${client[@]}" --set backend.url="http://127.0.0.1:${side#*:}/v1" \
                --set engine.max_model_len=2048 --set workload.num_requests=300 --set workload.arrival.process=poisson \
                --set workload.arrival.rate=32 --out "$dir/${side%%:*}_$k" | tail -4
        done
    done
    python benchmarks/ab_summaries.py "$dir" "$dir/poisson32.json"
}

capacity() {
    serve 8002 "$out/capacity.on.log" "${sharegpt[0]}" --set engine.max_model_len=2048 "${toggles_on[@]}" || return
    "${llmbench[@]}" capacity "${sharegpt[@]}" "${client[@]}" --set backend.url=http://127.0.0.1:8002/v1 \
        --set engine.max_model_len=2048 --set workload.arrival.process=poisson --start 48 --seconds 20 \
        --tolerance 0.15 --repeats 2 --max-runs 7 --out "$out/capacity" | tail -20
}

multiturn() {
    local dir=$out/multiturn k
    local conversations=(configs/llama3-8b-multiturn.yaml --set model.tokenizer="$tokenizer" --set workload.dataset.path=null)
    serve 8003 "$dir.cache.log" configs/llama3-8b-multiturn.yaml "${side_by_side[@]}" --set engine.prefix_caching=true || return
    serve 8004 "$dir.nocache.log" configs/llama3-8b-multiturn.yaml "${side_by_side[@]}" --set engine.prefix_caching=false || return
    for k in 1 2 3; do
        for side in A:8003 B:8004; do
            "${llmbench[@]}" run "${conversations[@]}" "${client[@]}" --set backend.url="http://127.0.0.1:${side#*:}/v1" \
                --set workload.num_requests=80 --set workload.arrival.rate=8 --set workload.session.think_time_s=0.5 \
                --out "$dir/${side%%:*}_$k" | tail -4
        done
    done
    python benchmarks/ab_summaries.py "$dir" "$dir/multiturn.json"
}

energy() {
    "${llmbench[@]}" run configs/llama3-8b-throughput.yaml --set backend.type=server --no-report --repeat 3 \
        --out "$out/energy/throughput" | tail -4
    "${llmbench[@]}" run "${sharegpt[@]}" --set backend.type=server --no-report --repeat 3 \
        --set engine.max_model_len=2048 \
        --set workload.max_concurrency=1 --set workload.num_requests=24 --set workload.warmup_requests=2 \
        --set workload.arrival.process=inf --set workload.dataset.output_len=128 --out "$out/energy/bs1" | tail -4
}

warmcache() {
    local dir=$out/warmcache k
    local same_run=("${sharegpt[@]}" "${client[@]}" --set backend.url=http://127.0.0.1:8005/v1
        --set engine.max_model_len=2048 --set workload.num_requests=300 --set workload.arrival.process=poisson
        --set workload.arrival.rate=32)
    serve 8005 "$dir.log" "${sharegpt[0]}" --set engine.max_model_len=2048 --set engine.prefix_caching=true \
        "${toggles_on[@]}" || return
    "${llmbench[@]}" run "${same_run[@]}" --out "$dir/cold" | tail -4
    for k in 1 2 3; do
        "${llmbench[@]}" run "${same_run[@]}" --out "$dir/A_$k" | tail -4
        "${llmbench[@]}" run "${same_run[@]}" --set backend.reset_prefix_cache=true --out "$dir/B_$k" | tail -4
    done
    python benchmarks/ab_summaries.py "$dir" "$dir/warmcache.json"
}

current=""
# `timeout` signals the whole group: the runs write their partial results, then this packs them
trap 'stop_servers; [ -n "$current" ] && pack "$current"; exit 143' TERM

for section in "$@"; do
    case $section in
        poisson32 | capacity | multiturn | energy | warmcache)
            current=$section
            mkdir -p "$out/$section"
            echo "$section: start ($(date +%T))"
            "$section"
            stop_servers  # also after a section whose server failed to start: none outlives it
            pack "$section"
            current=""
            ;;
        *) echo "error: unknown section $section (poisson32 capacity multiturn energy warmcache)" >&2; exit 2 ;;
    esac
done
