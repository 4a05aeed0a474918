#!/usr/bin/env bash
# The CPU rounding model of the chunked backward (scripts/models/chunk_backward_rounding.py --form kernels) on the
# case main fails on the H200 (session 22, call 5): one stage's precision changed at a time, dq / dk / dv / dg / dbeta
# relative RMSE. Run from the repository root after building build-cpu (CMake). Output: cpu-model-near-identical.txt.
set -uo pipefail
S=14329222173504304775
for o in "--products bf16x3" "--products bf16x3 --precision tinv=stages-3xtf32" \
  "--products bf16x3 --precision aqk=tf32" "--products tf32" "--products bf16x3 --precision reverse=tf32" \
  "--products bf16x3 --precision akk=tf32" "--products bf16x3 --precision wu=bf16x3"; do
  timeout 600 ./build-cpu/kda-verify --suite backward-full --fp32-grads --seed $S --filter near_identical_keys_beta_at_2 \
    --json /tmp/model.json --impl "cmd:python3 scripts/models/chunk_backward_rounding.py --form kernels --pairs blocked $o" \
    > /dev/null 2>&1
  python3 -c "
import json, sys
c = json.load(open('/tmp/model.json'))['cases'][0]
g = c.get('grads')
print('%-58s' % sys.argv[1], ' '.join('%s %.2e' % (k, g[k]['rel_rmse']) for k in ('dq', 'dk', 'dv', 'dg', 'dbeta'))
      if g else 'no gradients: ' + str(c)[:200])" "$o"
done
