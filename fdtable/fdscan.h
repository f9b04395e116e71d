/* fdscan.h: the order in which the fd window (fdwindow.c free_in) looks
 * for free fd numbers in a range, one ppoll of up to FREE_LOOK numbers at
 * a time, from where free ones were last seen and round the range once.
 * Apart, so that a test (scan.go) walks it without a process to look in. */
#ifndef OSF_FDTABLE_FDSCAN_H
#define OSF_FDTABLE_FDSCAN_H

/* fdt_scan_len returns how many numbers the look after done of them,
 * from number from, takes of [lo, hi): at most look, none past hi (the
 * next look starts at lo), and none the scan looked at already, so that a
 * scan from any number of the range counts each free one once (a last
 * look of a full look's length from lo, after a start off a look's
 * boundary, counted again the free numbers it began with: four where
 * there were three, an accept that then found too few). 0 when done
 * covers the range. */
static inline int fdt_scan_len(int lo, int hi, int from, int done, int look)
{
	int k = hi - from < look ? hi - from : look;

	return k < hi - lo - done ? k : hi - lo - done;
}

/* fdt_scan_next returns where the look after one of k numbers from from
 * starts. */
static inline int fdt_scan_next(int lo, int hi, int from, int k)
{
	return from + k >= hi ? lo : from + k;
}

#endif
