#!/usr/bin/env python3
"""optuna-examples' sklearn_simple.py, ported to sweepd by changing one line.

Optimize the classifier and its hyperparameters on the iris data set (it ships with
scikit-learn): a support vector classifier or a random forest, each with params of its own.
The objective is Optuna's, unchanged; only the last line differs:

    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=100)

became ``sweepd_worker.serve(objective)``, with the direction and the budget in
``examples/sklearn_simple.toml``::

    sweepd run -c examples/sklearn_simple.toml
    python3 -c "import optuna; s = optuna.load_study(study_name='sklearn-simple', \\
        storage='sqlite:///examples/sklearn_simple.db'); print(s.best_trial.params)"

Each trial's params follow its branch: an SVC trial has ``svc_c`` and no ``rf_max_depth``.
"""

import optuna  # noqa: F401  (the objective is Optuna's; sweepd needs nothing from it)
import sklearn.datasets
import sklearn.ensemble
import sklearn.model_selection
import sklearn.svm

import sweepd_worker


# FYI: Objective functions can take additional arguments
# (https://optuna.readthedocs.io/en/stable/faq.html#objective-func-additional-args).
def objective(trial):
    iris = sklearn.datasets.load_iris()
    x, y = iris.data, iris.target

    classifier_name = trial.suggest_categorical("classifier", ["SVC", "RandomForest"])
    if classifier_name == "SVC":
        svc_c = trial.suggest_float("svc_c", 1e-10, 1e10, log=True)
        classifier_obj = sklearn.svm.SVC(C=svc_c, gamma="auto")
    else:
        rf_max_depth = trial.suggest_int("rf_max_depth", 2, 32, log=True)
        classifier_obj = sklearn.ensemble.RandomForestClassifier(
            max_depth=rf_max_depth, n_estimators=10
        )

    score = sklearn.model_selection.cross_val_score(classifier_obj, x, y, n_jobs=-1, cv=3)
    accuracy = score.mean()
    return accuracy


if __name__ == "__main__":
    sweepd_worker.serve(objective)  # was: study.optimize(objective, n_trials=100)
