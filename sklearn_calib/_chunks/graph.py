"""The reduction graph of a pass over chunks: one dask graph layer.

A fit or a metric over chunks is a function applied to every chunk and a
combine of the (small) results; :func:`reduction_graph` writes that as dask
tasks, which whatever scheduler is active computes.
"""

import functools
import uuid

# Children per combine task of the reduction tree.
_TREE_WIDTH = 8


def _combine_all(combine, *values):
    return functools.reduce(combine, values)


def reduction_graph(keys, func, combine, dependencies):
    """A delayed ``combine`` over ``func(*keys[i])`` of every chunk, as one layer.

    ``keys[i]`` holds the keys (or None) of chunk ``i``'s blocks. The tasks
    are written into a single graph layer: a task per chunk, then a balanced
    tree of combine tasks with ``_TREE_WIDTH`` children each. Wrapping each
    chunk in its own ``dask.delayed`` call instead would copy the layer table
    of the inputs into every task's graph, which costs memory quadratic in the
    number of chunks when the input has a layer per chunk (as
    ``ChunkedDataset.to_dask`` arrays used to): 1 GB of graph for 2,400
    chunks.
    """
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    # A fresh name per reduction: the function differs from pass to pass.
    name = f"calib-reduce-{uuid.uuid4().hex}"
    layer = {(name, 0, i): (func, *chunk) for i, chunk in enumerate(keys)}
    level, parts = 0, [(name, 0, i) for i in range(len(keys))]
    while len(parts) > 1:
        level += 1
        groups = [parts[i : i + _TREE_WIDTH] for i in range(0, len(parts), _TREE_WIDTH)]
        parts = []
        for j, group in enumerate(groups):
            layer[(name, level, j)] = (_combine_all, combine, *group)
            parts.append((name, level, j))
    graph = HighLevelGraph.from_collections(name, layer, dependencies=dependencies)
    return Delayed(parts[0], graph, layer=name)
