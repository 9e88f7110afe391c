/* AddressSanitizer builds (NDWS_SANITIZE=1, docs/kernels.md "Sanitizer builds"): the bytes of a
 * workspace block that no live array owns are poisoned, so an overflow inside a shared block is
 * caught too; elsewhere the macros compile to nothing. Included by _memory (blocks) and _core
 * (the arena). */
#ifndef NDWS_POISON_H
#define NDWS_POISON_H

#if defined(__SANITIZE_ADDRESS__)
#  define NDWS_ASAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define NDWS_ASAN 1
#  endif
#endif
#ifdef NDWS_ASAN
#  include <sanitizer/asan_interface.h>
#  define ndws_poison(p, n) ASAN_POISON_MEMORY_REGION((p), (size_t)(n))
#  define ndws_unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (size_t)(n))
#  define NDWS_SANITIZED 1
#else
#  define ndws_poison(p, n) ((void)(p), (void)(n))
#  define ndws_unpoison(p, n) ((void)(p), (void)(n))
#  define NDWS_SANITIZED 0
#endif

#endif /* NDWS_POISON_H */
