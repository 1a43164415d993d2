# SPDX-License-Identifier: MIT
"""The reader's resharding path (metadata from rank 0's blob, rows of items
by ranged reads, narrowing into the destination) on one rank, with
Context.read_ranges served from the rank's own restored shard. The real
ckpt_read_ranges across ranks is test_dcp_reshard.py's."""

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

import ckpt
import ckpt.dcp as cdcp
from ckpt.dcp import CkptStager, CkptStorageReader, CkptStorageWriter


def _own_shard_ranges(self, step, reads):
    with self.restore(step, agree=False, exact=True) as r:
        for rq in reads:
            assert rq.rank == 0
            data = r.blob() if rq.tensor is None else bytes(r.tensor(rq.tensor, "memoryview"))
            rq.total, rq.result = len(data), 0
            if rq.length:
                assert rq.offset + rq.length <= len(data), (rq.tensor, rq.offset, rq.length)
                rq.data = bytearray(data[rq.offset:rq.offset + rq.length])
    return list(reads)


@pytest.fixture
def ranged(monkeypatch, ckptd):
    monkeypatch.setattr(ckpt, "HAVE_READ_RANGES", True)
    monkeypatch.setattr(ckpt.Context, "read_ranges", _own_shard_ranges)
    with ckpt.connect(job="ranges", rank=0, world_size=1, max_save_bytes=1 << 20) as c:
        yield c


def test_reshard_path_reads_rows_and_narrows(ranged):
    w = torch.arange(60, dtype=torch.float32).view(12, 5)
    state = {"w": w, "b": torch.arange(7, dtype=torch.bfloat16), "s": torch.tensor(3.5),
             "opt": {"lr": 0.1, "betas": (0.9, 0.95)}}
    wr = CkptStorageWriter(ranged, 4)
    dcp.async_save(state, storage_writer=wr, async_stager=CkptStager(wr)).result()

    out = {"w": torch.zeros(12, 5), "b": torch.zeros(7, dtype=torch.bfloat16),
           "s": torch.tensor(0.0), "opt": {"lr": None, "betas": None}}
    reader = CkptStorageReader(ranged, reshard=True)
    dcp.load(out, storage_reader=reader)
    assert reader.loaded_step == 4 and reader._restore is None  # never the own-shard path
    assert torch.equal(out["w"], w) and torch.equal(out["b"], state["b"])
    assert out["s"].item() == 3.5 and out["opt"] == {"lr": 0.1, "betas": (0.9, 0.95)}

    # A resharding read: rows 3..6, columns 1..2 of the stored chunk.
    md = reader.read_metadata()
    reader.set_up_storage_reader(md, True)
    item = ReadItem(type=LoadItemType.TENSOR, dest_index=MetadataIndex("w", [0, 0]),
                    dest_offsets=torch.Size([0, 0]), storage_index=MetadataIndex("w", [0, 0]),
                    storage_offsets=torch.Size([3, 1]), lengths=torch.Size([4, 2]))
    assert torch.equal(reader._source(item), w[3:7, 1:3])


def test_item_names_are_stable_and_valid():
    assert cdcp.item_name("model.layers.0.weight") == "model.layers.0.weight"
    assert cdcp.item_name("w", [0, 0]) == "w"
    assert cdcp.item_name("w", [4, 0]) == "w@4,0"
    assert cdcp.item_name("a/b@c%") == "a%2Fb%40c%25"
    long = cdcp.item_name("x" * 400, [8])
    assert len(long.encode()) <= 255 and long == cdcp.item_name("x" * 400, [8])
    assert long != cdcp.item_name("x" * 400, [16])
