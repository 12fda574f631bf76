"""Runs an ONNX model in ONNX Runtime on inputs from an NPZ file and prints the logits as JSON.

Usage: run_onnx.py MODEL.onnx INPUTS.npz. The NPZ holds (at least) every input of the model by
name, as `gnn4colliders features` writes them; prints {"logits": [[...], ...]}.
"""

import json
import sys

import numpy as np
import onnxruntime


def main(model, inputs):
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    arrays = np.load(inputs)
    feed = {i.name: arrays[i.name] for i in session.get_inputs()}
    (logits,) = session.run(["logits"], feed)
    print(json.dumps({"logits": logits.astype(float).tolist()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
