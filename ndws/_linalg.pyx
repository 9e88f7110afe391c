# PLACEHOLDER under construction (issue 3): native matmul / gemm dispatch.
