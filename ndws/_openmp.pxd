# OpenMP shims. The build probes for OpenMP (setup.py) and compiles without it when the probe
# fails or NDWS_NO_OPENMP=1; these wrappers keep every caller identical in both builds.
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define NDWS_OPENMP 1
    static inline int ndws_omp_get_max_threads(void) { return omp_get_max_threads(); }
    static inline void ndws_omp_set_num_threads(int n) { omp_set_num_threads(n); }
    #else
    #define NDWS_OPENMP 0
    static inline int ndws_omp_get_max_threads(void) { return 1; }
    static inline void ndws_omp_set_num_threads(int n) { (void)n; }
    #endif
    """
    const int NDWS_OPENMP
    int ndws_omp_get_max_threads() noexcept nogil
    void ndws_omp_set_num_threads(int n) noexcept nogil
