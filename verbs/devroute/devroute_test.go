package devroute

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysfs builds a sysfs tree under a temp dir from path → content
// entries; a content of "/" makes a directory.
func fakeSysfs(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if content == "/" {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDeviceForInterfaceSysfs(t *testing.T) {
	roce := map[string]string{
		"class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0": "eth0\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/1": "eth0\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/2": "eth0.100\n",
		"class/infiniband/mlx5_0/ports/2/gid_attrs/ndevs/0": "eth1\n",
		"class/infiniband/mlx5_0/ports/2/gid_attrs/ndevs/9": "/", // unused entry: unreadable
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0":   "veth7\n",
	}
	ib := map[string]string{
		"class/infiniband/mlx4_0/ports/1/state": "4: ACTIVE\n",
		"class/infiniband/mlx4_0/ports/2/state": "4: ACTIVE\n",
		"class/net/ib0/dev_port":                "0\n",
		"class/net/ib1/dev_port":                "1\n",
		"class/net/ib2/dev_id":                  "0x1\n",
		"class/net/ib3/dev_port":                "5\n",
	}
	lookup := func(m map[string]string) func(string) (string, error) {
		return func(ifname string) (string, error) {
			if d, ok := m[ifname]; ok {
				return d, nil
			}
			return "", errors.New("rdma device not found for netdev " + ifname)
		}
	}
	roceLookup := lookup(map[string]string{"eth0": "mlx5_0", "eth1": "mlx5_0", "eth0.100": "mlx5_0", "veth7": "rxe0"})
	ibLookup := lookup(map[string]string{"ib0": "mlx4_0", "ib1": "mlx4_0", "ib2": "mlx4_0", "ib3": "mlx4_0"})

	tests := []struct {
		name     string
		files    map[string]string
		lookup   func(string) (string, error)
		ifname   string
		dev      string
		port     int
		fail     bool
		reason   string
		kernelNo bool
	}{
		{name: "roce port 1", files: roce, lookup: roceLookup, ifname: "eth0", dev: "mlx5_0", port: 1},
		{name: "roce port 2", files: roce, lookup: roceLookup, ifname: "eth1", dev: "mlx5_0", port: 2},
		{name: "roce vlan", files: roce, lookup: roceLookup, ifname: "eth0.100", dev: "mlx5_0", port: 1},
		{name: "rxe", files: roce, lookup: roceLookup, ifname: "veth7", dev: "rxe0", port: 1},
		{name: "gid scan when rdmamap fails", files: roce, lookup: lookup(nil), ifname: "veth7", dev: "rxe0", port: 1},
		{name: "roce not listed", files: roce, lookup: lookup(nil), ifname: "eth9", fail: true,
			reason: "no device's GID table lists it (rdmamap: rdma device not found for netdev eth9)"},
		{name: "ethernet not listed: no second scan", files: withFile(roce, "class/net/eth9/type", "1\n"),
			lookup: func(ifname string) (string, error) {
				t.Errorf("rdmamap asked about Ethernet interface %s", ifname)
				return "", errors.New("asked")
			}, ifname: "eth9", fail: true, reason: "no device's GID table lists it"},
		{name: "ib port 1", files: ib, lookup: ibLookup, ifname: "ib0", dev: "mlx4_0", port: 1},
		{name: "ib port 2", files: ib, lookup: ibLookup, ifname: "ib1", dev: "mlx4_0", port: 2},
		{name: "ib dev_id", files: ib, lookup: ibLookup, ifname: "ib2", dev: "mlx4_0", port: 2},
		{name: "ib bad port", files: ib, lookup: ibLookup, ifname: "ib3", fail: true,
			reason: "device mlx4_0 matches but it has no port 6 for ib3"},
		{name: "empty class", files: map[string]string{"class/infiniband": "/"}, lookup: roceLookup, ifname: "eth0",
			fail: true, reason: "/class/infiniband is empty"},
		{name: "no class", files: map[string]string{"class/net": "/"}, lookup: roceLookup, ifname: "eth0",
			fail: true, reason: "/class/infiniband does not exist (kernel has no RDMA support)", kernelNo: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeSysfs(t, tt.files)
			h := Host{Sysfs: root, Lookup: tt.lookup}
			dev, port, serr := h.forInterface(tt.ifname)
			if !tt.fail {
				if serr != nil {
					t.Fatalf("error %v", serr)
				}
				if dev != tt.dev || port != tt.port {
					t.Fatalf("got %s port %d, want %s port %d", dev, port, tt.dev, tt.port)
				}
				return
			}
			if serr == nil {
				t.Fatalf("got %s port %d, want error", dev, port)
			}
			if serr.NoKernel != tt.kernelNo {
				t.Errorf("error %v: NoKernel = %v", serr, !tt.kernelNo)
			}
			err := serr
			prefix := "no RDMA device serves interface " + tt.ifname + ": "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), tt.reason) {
				t.Errorf("message %q, want %q...%q", err, prefix, tt.reason)
			}
		})
	}
}

func TestPortNetdevs(t *testing.T) {
	root := fakeSysfs(t, map[string]string{
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0": "eth0\n",
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/1": "eth0\n",
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/2": "bond0\n",
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/3": "\n",
	})
	got := PortNetdevs(root, "rxe0", 1)
	if strings.Join(got, ",") != "bond0,eth0" {
		t.Errorf("portNetdevs = %v, want [bond0 eth0]", got)
	}
	if got := PortNetdevs(root, "rxe0", 2); got != nil {
		t.Errorf("missing port: %v", got)
	}
}

// TestPortLists: the scan reads entries in index order past unused ones
// (unreadable) until one names the interface, and ends at the table's end.
func TestPortLists(t *testing.T) {
	root := fakeSysfs(t, map[string]string{
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0": "/", // unused: reading fails
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/1": "eth0\n",
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/2": "bond0\n",
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/4": "eth9\n", // past the end (no 3)
	})
	for ifname, want := range map[string]bool{"eth0": true, "bond0": true, "eth9": false, "eth1": false} {
		if got := portLists(root, "rxe0", 1, ifname); got != want {
			t.Errorf("portLists(%s) = %v, want %v", ifname, got, want)
		}
	}
	if portLists(root, "rxe0", 2, "eth0") {
		t.Error("a missing port lists eth0")
	}
}

// fakeHost is a host with eth0 (10.0.0.5/24, served by mlx5_0 port 1), eth1
// (192.168.1.5/24, no RDMA) and lo, whose kernel routes 10.0.0.0/24 and
// 172.16.0.0/12 through eth0, 192.168.1.0/24 through eth1, 127.0.0.0/8
// through lo, and nothing else.
func fakeHost(t *testing.T, devices ...string) Host {
	files := map[string]string{"class/net": "/"}
	for _, d := range devices {
		files["class/infiniband/"+d+"/ports/1/state"] = "4: ACTIVE\n"
	}
	if len(devices) > 0 && devices[0] == "mlx5_0" {
		files["class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"] = "eth0\n"
	}
	a := netip.MustParseAddr
	routes := []struct {
		pfx netip.Prefix
		src netip.Addr
	}{
		{netip.MustParsePrefix("10.0.0.0/24"), a("10.0.0.5")},
		{netip.MustParsePrefix("172.16.0.0/12"), a("10.0.0.5")},
		{netip.MustParsePrefix("192.168.1.0/24"), a("192.168.1.5")},
		{netip.MustParsePrefix("127.0.0.0/8"), a("127.0.0.1")},
	}
	return Host{
		Sysfs: fakeSysfs(t, files),
		Lookup: func(ifname string) (string, error) {
			return "", errors.New("rdma device not found for netdev " + ifname)
		},
		Interfaces: func() ([]Interface, error) {
			return []Interface{
				{"lo", []netip.Addr{a("127.0.0.1"), a("::1")}},
				{"eth1", []netip.Addr{a("192.168.1.5")}},
				{"eth0", []netip.Addr{a("10.0.0.5")}},
			}, nil
		},
		Source: func(dst netip.Addr) (netip.Addr, error) {
			for _, r := range routes {
				if r.pfx.Contains(dst) {
					return r.src, nil
				}
			}
			return netip.Addr{}, errors.New("network is unreachable")
		},
	}
}

func TestForRoute(t *testing.T) {
	tests := []struct {
		name    string
		devices []string
		addr    string
		device  string
		why     string
	}{
		{"no devices", nil, "10.0.0.7", "", NoDevice},
		{"own address", []string{"mlx5_0"}, "10.0.0.5", "mlx5_0 port 1", ""},
		{"mapped", []string{"mlx5_0"}, "::ffff:10.0.0.5", "mlx5_0 port 1", ""},
		{"subnet", []string{"mlx5_0"}, "10.0.0.7", "mlx5_0 port 1", ""},
		{"routed", []string{"mlx5_0"}, "172.20.1.1", "mlx5_0 port 1", ""},
		{"interface without device", []string{"mlx5_0", "mlx5_1"}, "192.168.1.9", "",
			"no RDMA device serves address 192.168.1.5 (interface eth1): no device's GID table lists it (rdmamap: rdma device not found for netdev eth1)"},
		{"loopback", []string{"mlx5_0"}, "127.0.0.1", "",
			"no RDMA device serves address 127.0.0.1 (interface lo): no device's GID table lists it (rdmamap: rdma device not found for netdev lo)"},
		{"no route", []string{"mlx5_0"}, "8.8.8.8", "", "no route to 8.8.8.8: network is unreachable"},
		{"unspecified", []string{"mlx5_0"}, "0.0.0.0", "mlx5_0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev, ok, why := fakeHost(t, tt.devices...).ForRoute(netip.MustParseAddr(tt.addr))
			if dev != tt.device || ok != (tt.device != "") || why != tt.why {
				t.Errorf("ForRoute(%s) = %q, %v, %q; want %q, %v, %q", tt.addr, dev, ok, why, tt.device, tt.device != "", tt.why)
			}
		})
	}
}

// TestSystem runs the algorithm on this machine: it must not fail, and
// must say why whenever it finds no device.
func TestSystem(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "0.0.0.0", "192.0.2.1", "::1"} {
		dev, ok, why := System.ForRoute(netip.MustParseAddr(a))
		if ok == (why != "") || ok != (dev != "") {
			t.Errorf("ForRoute(%s) = %q, %v, %q: inconsistent", a, dev, ok, why)
		}
		t.Logf("ForRoute(%s) = %q, %v, %q", a, dev, ok, why)
	}
	src, err := System.Source(netip.MustParseAddr("127.0.0.1"))
	if err != nil || src != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("Source(127.0.0.1) = %v, %v", src, err)
	}
}

// withFile returns files with one more.
func withFile(files map[string]string, name, content string) map[string]string {
	out := map[string]string{name: content}
	for k, v := range files {
		out[k] = v
	}
	return out
}
