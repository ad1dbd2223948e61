#!/usr/bin/env python3
"""optuna-examples' pytorch_checkpoint.py, ported to sweepd by changing one line.

The multi-layer perceptron of ``pytorch_simple.py``, trained with a checkpoint saved after every
epoch, so that a trial whose process is killed (a ``kill -9``, a preemption, a lost node)
resumes where it left off instead of starting over. The checkpoint code is Optuna's, unchanged:
a retried trial carries Optuna's ``failed_trial`` system attribute, which
``RetryFailedTrialCallback.retried_trial_number(trial)`` reads, and the retry loads the
checkpoint the killed attempt saved under that number. sweepd re-enqueues a killed trial as
Optuna's ``RetryFailedTrialCallback`` does (``[retry] crash`` in the TOML) and hands the helper's
trial the same system attributes. Only the last line differs:

    storage = optuna.storages.RDBStorage(
        "sqlite:///example.db",
        heartbeat_interval=1,
        failed_trial_callback=RetryFailedTrialCallback(),
    )
    study = optuna.create_study(storage=storage, study_name="pytorch_checkpoint",
                                direction="maximize", load_if_exists=True)
    study.optimize(objective, n_trials=10, timeout=600)

became ``sweepd_worker.serve(objective)``, with the storage, direction and budget in the TOML
(sweepd notices a dead worker at once: no heartbeat to wait for)::

    sweepd run -c examples/pytorch_checkpoint.toml

As in ``pytorch_simple.py``, the data is scikit-learn's bundled digits set, not FashionMNIST,
so that the example runs without network access, and ``EPOCHS`` (10, as there) may be set in
the environment: the suite sets it high enough to kill a trial between two epochs. ``trial.checkpoint_dir`` (a directory per
trial that its retries share and sweepd removes once the trial is final) is sweepd's own way to
the same end; this port keeps Optuna's ``CHECKPOINT_DIR``, as the example has it.
"""

import os
import shutil

import optuna
from optuna.storages import RetryFailedTrialCallback
import sklearn.datasets
import sklearn.model_selection
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data

import sweepd_worker

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BATCHSIZE = 128
CLASSES = 10
EPOCHS = int(os.environ.get("EPOCHS", "10"))
N_TRAIN_EXAMPLES = BATCHSIZE * 30
N_VALID_EXAMPLES = BATCHSIZE * 10
IN_FEATURES = 8 * 8
CHECKPOINT_DIR = "pytorch_checkpoint"


def define_model(trial):
    # We optimize the number of layers, hidden units and dropout ratio in each layer.
    n_layers = trial.suggest_int("n_layers", 1, 3)
    layers = []

    in_features = IN_FEATURES
    for i in range(n_layers):
        out_features = trial.suggest_int("n_units_l{}".format(i), 4, 128)
        layers.append(nn.Linear(in_features, out_features))
        layers.append(nn.ReLU())
        p = trial.suggest_float("dropout_l{}".format(i), 0.2, 0.5)
        layers.append(nn.Dropout(p))

        in_features = out_features
    layers.append(nn.Linear(in_features, CLASSES))
    layers.append(nn.LogSoftmax(dim=1))

    return nn.Sequential(*layers)


def get_digits():
    # Load the digits data set (FashionMNIST in optuna-examples, which downloads it).
    digits = sklearn.datasets.load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_valid, y_train, y_valid = sklearn.model_selection.train_test_split(
        x, y, test_size=0.25, random_state=0
    )
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x_train, y_train), batch_size=BATCHSIZE, shuffle=True
    )
    valid_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x_valid, y_valid), batch_size=BATCHSIZE, shuffle=True
    )
    return train_loader, valid_loader


def objective(trial):
    # Generate the model.
    model = define_model(trial).to(DEVICE)

    # Generate the optimizers.
    optimizer_name = trial.suggest_categorical("optimizer", ["Adam", "RMSprop", "SGD"])
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    optimizer = getattr(optim, optimizer_name)(model.parameters(), lr=lr)

    # A retried trial resumes from the checkpoint its failed attempt saved.
    trial_number = RetryFailedTrialCallback.retried_trial_number(trial)
    trial_checkpoint_dir = os.path.join(CHECKPOINT_DIR, str(trial_number))
    checkpoint_path = os.path.join(trial_checkpoint_dir, "model.pt")
    checkpoint_exists = os.path.isfile(checkpoint_path)

    if trial_number is not None and checkpoint_exists:
        checkpoint = torch.load(checkpoint_path)
        epoch = checkpoint["epoch"]
        epoch_begin = epoch + 1

        print(f"Loading a checkpoint from trial {trial_number} in epoch {epoch}.", flush=True)

        model.load_state_dict(checkpoint["model_state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        accuracy = checkpoint["accuracy"]
    else:
        trial_checkpoint_dir = os.path.join(CHECKPOINT_DIR, str(trial.number))
        checkpoint_path = os.path.join(trial_checkpoint_dir, "model.pt")
        epoch_begin = 0

    # Get the digits data set.
    train_loader, valid_loader = get_digits()

    os.makedirs(trial_checkpoint_dir, exist_ok=True)
    # A checkpoint may be corrupted when the process is killed during `torch.save`.
    # Reduce the risk by first calling `torch.save` to a temporary file, then copy.
    tmp_checkpoint_path = os.path.join(trial_checkpoint_dir, "tmp_model.pt")

    print(f"Checkpoint path for trial is '{checkpoint_path}'.", flush=True)

    # Training of the model.
    for epoch in range(epoch_begin, EPOCHS):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            # Limiting training data for faster epochs.
            if batch_idx * BATCHSIZE >= N_TRAIN_EXAMPLES:
                break

            data, target = data.view(data.size(0), -1).to(DEVICE), target.to(DEVICE)

            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()

        # Validation of the model.
        model.eval()
        correct = 0
        with torch.no_grad():
            for batch_idx, (data, target) in enumerate(valid_loader):
                # Limiting validation data.
                if batch_idx * BATCHSIZE >= N_VALID_EXAMPLES:
                    break
                data, target = data.view(data.size(0), -1).to(DEVICE), target.to(DEVICE)
                output = model(data)
                # Get the index of the max log-probability.
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()

        accuracy = correct / min(len(valid_loader.dataset), N_VALID_EXAMPLES)

        trial.report(accuracy, epoch)

        print(f"Saving a checkpoint in epoch {epoch}.", flush=True)

        torch.save(
            {
                "epoch": epoch,
                "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict(),
                "accuracy": accuracy,
            },
            tmp_checkpoint_path,
        )
        shutil.move(tmp_checkpoint_path, checkpoint_path)

        # Handle pruning based on the intermediate value.
        if trial.should_prune():
            shutil.rmtree(trial_checkpoint_dir)
            raise optuna.exceptions.TrialPruned()

    shutil.rmtree(trial_checkpoint_dir)

    return accuracy


if __name__ == "__main__":
    sweepd_worker.serve(objective)  # was: study.optimize(objective, n_trials=10, timeout=600)
