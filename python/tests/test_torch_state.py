"""gandiva.torch.Job in-process, outside gandiva: checkpoint contents, user
state, restore, and suspend hooks on a CPU-only model."""

import pytest
import torch

import gandiva
import gandiva.torch


@pytest.fixture(autouse=True)
def outside_gandiva(monkeypatch):
    for name in ("GANDIVA_PROGRESS_FILE", "GANDIVA_RESUME_FROM",
                 "GANDIVA_CHECKPOINT_DIR"):
        monkeypatch.delenv(name, raising=False)


class Counter:
    def __init__(self):
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, d):
        self.n = d["n"]


def make(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt


def train(job, model, opt, loader, max_steps, counter):
    for _ in job.epochs(100):
        for xb, yb in job.batches(loader, max_steps=max_steps):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            counter.n += 1
        if job.steps >= max_steps:
            break


def test_checkpoint_round_trip_with_user_state(tmp_path):
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(24, 4, generator=g),
                                          torch.randn(24, 1, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)

    model, opt = make()
    counter, extra = Counter(), {"lr_scale": 1.0}
    job = gandiva.torch.Job(model, opt)
    job.register_state("counter", counter)
    job.register_state("extra", get=lambda: dict(extra),
                       set=lambda d: extra.update(d))
    train(job, model, opt, loader, 9, counter)  # epoch 1, batch 3 of 6
    extra["lr_scale"] = 0.5
    assert (job.steps, job.epoch, job.batch_in_epoch) == (9, 1, 3)
    path = job.save(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.gdv"]
    train(job, model, opt, loader, 20, counter)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    model2, opt2 = make(seed=1)  # different initial parameters
    counter2, extra2 = Counter(), {"lr_scale": 1.0}
    job2 = gandiva.torch.Job(model2, opt2)
    job2.register_state("counter", counter2)
    job2.register_state("extra", get=lambda: dict(extra2),
                        set=lambda d: extra2.update(d))
    job2.load(str(tmp_path))  # a directory: checkpoint.gdv inside
    assert job2.restored_from == path
    assert (job2.steps, counter2.n, extra2["lr_scale"]) == (9, 9, 0.5)
    train(job2, model2, opt2, loader, 20, counter2)
    assert job2.steps == 20 and counter2.n == 20
    for k, v in model2.state_dict().items():
        assert torch.equal(v, expected[k]), k


def test_register_after_start_is_an_error():
    model, opt = make()
    job = gandiva.torch.Job(model, opt)
    assert job.start() is False
    with pytest.raises(RuntimeError):
        job.register_state("late", Counter())
    with pytest.raises(ValueError):
        gandiva.torch.Job(model, opt).register_state("bad")


def test_suspend_hooks_on_cpu_move_nothing():
    model, opt = make()
    loss = model(torch.randn(3, 4)).sum()
    loss.backward()
    opt.step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    job = gandiva.torch.Job(model, opt)
    job.offload()
    job.reload()
    assert list(model.parameters()) == params  # same Parameter objects
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
        assert v.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_suspend_hooks_on_cuda_free_device_memory():
    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 1024, device="cuda")).sum().backward()
    opt.step()
    job = gandiva.torch.Job(model, opt)
    torch.cuda.synchronize()
    used = torch.cuda.memory_allocated()
    job.offload()
    assert torch.cuda.memory_allocated() < used
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert all(p.grad.device.type == "cpu" for p in model.parameters())
    job.reload()
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert all(v.device.type == "cuda" for st in opt.state.values()
               for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    model(torch.randn(8, 1024, device="cuda")).sum().backward()
    opt.step()  # training goes on after the round trip
