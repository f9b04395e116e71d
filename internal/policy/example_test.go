package policy_test

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/osfproject/osf/internal/policy"
)

func ExampleConfig_Decide() {
	cfg, err := policy.Parse([]string{"OSF_ROUTES=kernel *:22; offload 10.0.0.0/8", "OSF_TRANSPORT=auto"})
	if err != nil {
		fmt.Println(err)
		return
	}
	rdma := func(netip.Addr) (string, bool, string) { return "mlx5_0", true, "" }
	for _, addr := range []string{"10.0.0.7:22", "10.0.0.7:5000", "192.168.1.1:80"} {
		d := cfg.Decide(policy.Query{
			Role:       policy.Client,
			Program:    "client",
			Addr:       netip.MustParseAddrPort(addr),
			RDMADevice: rdma,
		})
		fmt.Printf("%s: %s\n", addr, d)
	}
	// Output:
	// 10.0.0.7:22: kernel: route rule 1 chose kernel
	// 10.0.0.7:5000: rdma via mlx5_0 (rule 2)
	// 192.168.1.1:80: kernel: no route rule matched
}

func ExampleParse() {
	_, err := policy.Parse([]string{"OSF_ROUTES=offload local\noffload bogus 1.2.3.4:99999"})
	fmt.Println(err)
	// Output:
	// osf: OSF_ROUTES="offload bogus 1.2.3.4:99999" (rule 2): port 99999 out of range 1-65535
}

func ExampleConfig_Explain() {
	cfg := policy.Default()
	cfg.Explain(os.Stdout, policy.Query{Role: policy.Client, Program: "psql", Addr: netip.MustParseAddrPort("127.0.0.1:5432")})
	// Output:
	// routes (default, OSF_ROUTES is unset):
	//   1  kernel both * *:53
	//   2  offload both * local
	//      (implicit) kernel both * *
	// transport=auto strict=0
	//
	// client 127.0.0.1:5432, program psql:
	//   rule 1  no: port 5432 not in 53
	//   rule 2  yes: 127.0.0.1 is local (loopback)
	//   => shm: offloaded
	//      note: kernel TCP instead if the peer has no osf listener
}
