"""Evolution of harnesses: variation operators over the genome (operators.py), DEAP behind one factory
(toolbox.py), selection strategies and the "best" rule (selection.py), racing of new candidates
(racing.py), and the generation loop with its config (loop.py, config.py).

Nothing is imported here, so that `import harnevo.evolve.racing` stays light."""
