#!/usr/bin/env bash
# End-to-end check of the small GPT (examples/gpt.cpp) on Debian's fortunes: the default model
# trains 2 epochs of 60 steps and its validation loss must fall well below the uniform guess
# (ln 256 = 5.55 nats per byte) and below the first epoch's, it saves gpt.keras, and
# `lockstep generate` continues a prompt from that file the same way twice for one seed.
# Skips (77) without the fortunes package.
set -euo pipefail
gpt="$1"
cli="$2"
[ -f /usr/share/games/fortunes/science ] || { echo "fortunes not installed (apt-get install fortunes)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log="$out/log.txt"
"$gpt" --epochs 2 --steps 60 --out "$out/gpt.keras" --max-tokens 80 | tee "$log" >&2
[ -s "$out/gpt.keras" ] || { echo "gpt did not write gpt.keras"; exit 1; }
python3 - "$log" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
losses = [float(v) for v in re.findall(r"val_loss ([0-9.]+) - val_perplexity", text)]
r = json.loads(text.strip().split("\n")[-1])
print(f"validation losses {losses}, perplexity {r['val_perplexity']:.2f}, "
      f"training {r['train_tokens_per_sec']:.0f} tokens/s, generation "
      f"{r['generate_tokens_per_sec']:.0f} tokens/s with the cache, "
      f"{r['generate_nocache_tokens_per_sec']:.0f} without")
ok = len(losses) == 2 and losses[1] < losses[0] and losses[1] < 3.0 and r["val_perplexity"] < 20
ok = ok and r["generate_tokens_per_sec"] > 0 and r["generate_nocache_tokens_per_sec"] > 0
sys.exit(0 if ok else 1)
PY
a=$("$cli" generate --model "$out/gpt.keras" --prompt "The " --max-tokens 60 --seed 5 2>/dev/null)
b=$("$cli" generate --model "$out/gpt.keras" --prompt "The " --max-tokens 60 --seed 5 2>/dev/null)
printf '%s\n' "$a"
[ "$a" = "$b" ] || { echo "lockstep generate: two runs with seed 5 differ"; exit 1; }
case "$a" in "The "*) ;; *) echo "lockstep generate: the output does not start with the prompt"; exit 1 ;; esac
[ "${#a}" -ge 64 ] || { echo "lockstep generate: expected 60 bytes after the prompt"; exit 1; }
