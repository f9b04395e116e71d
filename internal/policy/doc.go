// Package policy owns osf's configuration and route policy: it parses the
// OSF_* variables into a Config and decides, for each connect and listen,
// whether the connection is offloaded and over which transport.
//
// It is pure Go (it builds with CGO_ENABLED=0) and is used by the Go core
// loaded into applications and by the osfrun and osfstat tools.
//
// # Variables
//
// All variables are optional; Vars lists them with their defaults.
//
//	OSF_ROUTES              route rules (below); unset means the default rules
//	OSF_TRANSPORT           auto | shm | rdma | kernel (default auto)
//	OSF_STRICT              0 | 1: fail instead of falling back to kernel TCP
//	OSF_LOG_LEVEL           debug | info | warn | error (default error)
//	OSF_LOG_FILE            log file (default standard error)
//	OSF_RING_SIZE           bytes per ring direction, power of two, 4K-64M (default 1M)
//	OSF_SPIN_US             µs a blocking call spins before sleeping, 0-1000000 (default 20)
//	OSF_POLL_SPIN_US        the same for poll, select, epoll and accept (default 20)
//	OSF_RDMA_POLL_US        µs the RDMA progress engine polls before sleeping, 0-1000000 (default 20)
//	OSF_CONNECT_TIMEOUT_MS  bound on offload handshakes, 1-60000 (default 1000)
//	OSF_DEBUG_LOAD_CORE     0 | 1: load the core at start-up
//	OSF_DEBUG_RDMA_SIM      0 | 1: RDMA over a software stand-in on this host (tests only)
//	OSF_LIB                 libosf.so for osfrun to preload
//
// Numbers are decimal digits only, without sign or blanks; OSF_RING_SIZE may
// end in K or M (binary). A malformed variable is a *ParseError that wraps
// ErrMalformed; other OSF_* names are ignored but reported by Unknown.
//
// # Route rules
//
// OSF_ROUTES holds rules separated by ';' or newlines; '#' starts a comment
// that runs to the end of the line. Each rule is
//
//	action [role [program]] target
//	action = offload | kernel
//	role   = client | server | both          (default both)
//	program = path.Match glob on the program's base name (default *)
//	target = addr [":" ports]
//	addr   = * | local | IPv4[/len] | "[" IPv6[/len] "]"
//	ports  = * | N | N-M
//
// A client is matched by the destination of connect, a server by the address
// it listens on; a listener on 0.0.0.0 or :: matches every address pattern.
// "local" means loopback or an address of this host. The first matching rule
// wins, and the implicit final rule "kernel both * *" catches the rest. When
// OSF_ROUTES is unset the rules are
//
//	kernel both * *:53
//	offload both * local
//
// # Configuration file
//
// Load merges the configuration file (/etc/osf.conf, or the file OSF_CONF
// names) into an environment as libosf.so's constructor does
// (preload/conf.c): one item per line, "OSF_NAME = value", a route rule
// ("offload|kernel ..."), "[program GLOB]" or "[global]"; '#' at the start
// or after a blank begins a comment. The environment overrides the file
// variable by variable; the file's rule lines, when it has any, replace the
// default rules. The merged environment carries OSF_CONF_ORIGIN, from which
// Parse reports a malformed value as "path:line" and Config.Where tells
// which line set a value. ParseFile and File.Merge are the parts.
//
// # Example
//
//	cfg, err := policy.Parse(os.Environ())
//	if errors.Is(err, policy.ErrMalformed) {
//		fmt.Fprintln(os.Stderr, err) // osf: OSF_RING_SIZE="5000": not a power of two
//		return
//	}
//	d := cfg.Decide(policy.Query{
//		Role:    policy.Client,
//		Program: "curl",
//		Addr:    netip.MustParseAddrPort("10.0.0.7:8080"),
//		IsLocal: policy.IsLocal,
//	})
//	if d.Transport == policy.Kernel {
//		log.Printf("not offloaded: %s", d.Reason.Describe(d.Rule, d.Detail))
//	}
//
// Reason codes are shared with the C side of osf and never renumbered; see
// AllReasons, Reason.Describe and Reason.Hint.
package policy
