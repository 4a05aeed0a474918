#!/usr/bin/env bash
# Session 74, calls 2 and 3 on the same warm H100 after s74_l1m.sh (89-156 s of device time left), run from the
# repository root with .carry/ab carrying the archives named:
# call 2: the step's gradient launches at train-h64-fixed, fuse against main72.
source scripts/lease_lib.sh; W=$OUT; [ -x /tmp/ab/fuse/kda-bench ] || lease_unpack main72 fuse; lease_ncu_launches fuse train-h64-fixed 'products|grad_tc|grad_pipe|grad_fused|grad_rows|reverse'; lease_ncu_launches main72 train-h64-fixed 'products|grad_tc|grad_pipe|grad_fused|grad_rows|reverse'
# call 3: the products and grad_tc at train-h96-fixed, tc512p against main72.
source scripts/lease_lib.sh; W=$OUT; lease_unpack tc512p; [ -x /tmp/ab/main72/kda-bench ] || lease_unpack main72; lease_ncu_launches tc512p train-h96-fixed 'grad_tc|products'; lease_ncu_launches main72 train-h96-fixed 'grad_tc|products'
