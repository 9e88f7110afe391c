# PLACEHOLDER under construction (issue 3): nogil activation, softmax, loss and updater kernels.
