// Package hugepages asks Linux to back large host buffers — a model's weights on XLA CPU — with
// 2 MiB transparent huge pages.
//
// A decoding step streams every weight once, hundreds of megabytes a token, through the TLB: with
// 4 KiB pages each 4 KiB of a weight costs a page walk, with 2 MiB pages each 2 MiB does. On the
// machines measured a streaming read of a buffer backed by huge pages ran 1.07-1.2x faster than of
// the same buffer in small pages (docs/performance.md). llama.cpp gets huge pages from the page
// cache of the GGUF file it maps; quanta's weights live in buffers the XLA plugin allocates, in
// small pages where transparent huge pages are "madvise" (most distributions' default), so
// Advise marks them and collapses them in place (madvise MADV_HUGEPAGE, then MADV_COLLAPSE,
// Linux 6.1 or later) once they hold their values. The values and their addresses do not change.
//
// Only whole, aligned 2 MiB pages inside a buffer can be huge: a buffer smaller than 2 MiB, and
// the ends of a larger one, stay in small pages. Elsewhere than Linux, with transparent huge
// pages "never", or where the kernel refuses (no free huge page), Advise does nothing and says
// so by returning 0. QUANTA_HUGE_PAGES=0 (or false, no, off) turns it off.
package hugepages
