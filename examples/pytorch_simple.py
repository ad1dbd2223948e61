#!/usr/bin/env python3
"""optuna-examples' pytorch_simple.py, ported to sweepd by changing one line.

Optimize a multi-layer perceptron: the number of layers, the units and dropout of each layer
(one ``n_units_l{i}`` and ``dropout_l{i}`` per layer, so a one-layer trial has no
``n_units_l1``), the optimizer and its learning rate, reporting the validation accuracy after
every epoch so that sweepd's pruner (``[pruner]`` in ``examples/pytorch_simple.toml``) can stop
unpromising trials. The objective is Optuna's, unchanged; only the last line differs:

    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=100, timeout=600)

became ``sweepd_worker.serve(objective)``, with the direction, budget and pruner in the TOML::

    sweepd run -c examples/pytorch_simple.toml

One deliberate change from optuna-examples: the data. FashionMNIST is downloaded there; here
it is scikit-learn's bundled digits data set (8x8 images, 10 classes), so that the example runs
on a machine without network access. Runs on the GPU sweepd binds the worker to, else the CPU.
"""

import optuna
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
EPOCHS = 10
N_TRAIN_EXAMPLES = BATCHSIZE * 30
N_VALID_EXAMPLES = BATCHSIZE * 10
IN_FEATURES = 8 * 8


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

    # Get the digits data set.
    train_loader, valid_loader = get_digits()

    # Training of the model.
    for epoch in range(EPOCHS):
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

        # Handle pruning based on the intermediate value.
        if trial.should_prune():
            raise optuna.exceptions.TrialPruned()

    return accuracy


if __name__ == "__main__":
    sweepd_worker.serve(objective)  # was: study.optimize(objective, n_trials=100, timeout=600)
