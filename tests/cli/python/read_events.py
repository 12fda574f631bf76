"""Prints what TensorBoard's own reader finds in a folder of event files, as JSON.

Usage: read_events.py FOLDER. Every scalar tag with its (step, value) pairs, as TensorBoard's
EventAccumulator keeps them (after it drops what a restarted run logged past its restart), and
the hparams plugin's summaries decoded from their HParamsPluginData.
"""

import json
import sys

from google.protobuf import json_format
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2


def main(folder):
    acc = event_accumulator.EventAccumulator(
        folder, size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    scalars = {
        tag: [[e.step, e.value] for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }
    hparams = {
        tag: json_format.MessageToDict(
            plugin_data_pb2.HParamsPluginData.FromString(content)
        )
        for tag, content in acc.PluginTagToContent("hparams").items()
    }
    print(json.dumps({"scalars": scalars, "hparams": hparams}))


if __name__ == "__main__":
    main(sys.argv[1])
