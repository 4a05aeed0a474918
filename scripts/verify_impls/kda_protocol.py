"""kda_protocol.py: reading and writing the files of kda-verify's external-implementation protocol
(docs/verifier_protocol.md) with numpy: bf16 travels as its raw 16 bits."""
import json
import os

import numpy as np

_NP = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int32": np.int32, "int64": np.int64}


def read_case(directory):
    """Returns (meta, tensors): tensors as float32/float64/int arrays, bf16 widened to float32 exactly."""
    with open(os.path.join(directory, "case.json")) as f:
        meta = json.load(f)
    tensors = {}
    for name, t in meta["tensors"].items():
        raw = open(os.path.join(directory, name + ".bin"), "rb").read()
        if t["dtype"] == "bfloat16":
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_NP[t["dtype"]])
        tensors[name] = arr.reshape(t["shape"])
    return meta, tensors


def write_output(directory, meta, name, array):
    """Writes array rounded once to the output's dtype (bf16: round to nearest even from float32)."""
    dtype = meta["outputs"][name]["dtype"]
    a = np.ascontiguousarray(array, dtype=np.float32 if dtype in ("bfloat16", "float32") else _NP[dtype])
    if dtype == "bfloat16":
        u = a.view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        a = u.astype(np.uint16)
    a.tofile(os.path.join(directory, name + ".bin"))
