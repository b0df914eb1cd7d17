// SPDX-License-Identifier: GPL-2.0
/*
 * Out-of-line copies of the static inline verbs that kernel::rdma calls.
 * One function each; bindgen exposes rust_helper_foo() as bindings::foo().
 */

#include <linux/device.h>
#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

const char *rust_helper_dev_name(const struct device *dev)
{
	return dev_name(dev);
}

void rust_helper_dev_put(struct net_device *dev)
{
	dev_put(dev);
}

u32 rust_helper_rdma_start_port(const struct ib_device *device)
{
	return rdma_start_port(device);
}

u32 rust_helper_rdma_end_port(const struct ib_device *device)
{
	return rdma_end_port(device);
}
