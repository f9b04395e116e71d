. "$OSF_ROOT/tests/rdmavm/guest/lib.sh"
echo "hello from $GUEST ($ADDR), peer $PEER_ADDR"
ibv_devinfo -d rxe0 | grep -E 'state|active_mtu'
barrier up 300
ping -c 2 -W 5 $PEER_ADDR | tail -2
