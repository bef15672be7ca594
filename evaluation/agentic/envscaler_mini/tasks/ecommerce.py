"""E-commerce: customers by email, products by name, then order edits, cancellations and returns."""

from ._common import TaskBook, call, check, close

ENV_CLASS = "OnlineStoreOrders"


def _order(customer, status, items, address):
    lines = [{"sku": sku, "quantity": q, "unit_price": PRICES[sku]} for sku, q in items]
    return {"customer_id": customer, "status": status, "items": lines,
            "total": round(sum(q * PRICES[sku] for sku, q in items), 2), "shipping_address": address}


PRODUCTS = {
    "SKU-1001": ("Trail Running Shoes", 89.5, 14), "SKU-1002": ("Merino Wool Socks", 12.0, 40),
    "SKU-1003": ("Insulated Water Bottle", 24.5, 0), "SKU-1004": ("Headlamp 300lm", 35.0, 8),
    "SKU-1005": ("Packable Rain Jacket", 120.0, 3), "SKU-1006": ("Camping Mug", 9.5, 25),
}
PRICES = {sku: price for sku, (_, price, _) in PRODUCTS.items()}

INIT_CONFIG = {
    "customers": {
        "U-501": {"name": "Hannah Cole", "email": "hannah.cole@shopmail.com", "store_credit": 0.0},
        "U-502": {"name": "Victor Mensah", "email": "v.mensah@shopmail.com", "store_credit": 15.0},
        "U-503": {"name": "Yuki Tanaka", "email": "yuki.t@shopmail.com", "store_credit": 0.0},
        "U-504": {"name": "Leo Martins", "email": "leo.martins@shopmail.com", "store_credit": 0.0},
    },
    "products": {sku: {"name": n, "price": p, "stock": s} for sku, (n, p, s) in PRODUCTS.items()},
    "orders": {
        "O-7781": _order("U-501", "pending", [("SKU-1001", 1)], "12 Elm Road, Leeds"),
        "O-7782": _order("U-502", "delivered", [("SKU-1004", 2)], "4 Quay Street, Bristol"),
        "O-7783": _order("U-503", "pending", [("SKU-1002", 3), ("SKU-1006", 1)], "88 Mill Lane, York"),
        "O-7784": _order("U-504", "shipped", [("SKU-1005", 1)], "3 Hill View, Bath"),
        "O-7785": _order("U-501", "delivered", [("SKU-1006", 2)], "12 Elm Road, Leeds"),
        "O-7786": _order("U-502", "pending", [("SKU-1005", 1)], "4 Quay Street, Bristol"),
    },
}

EMAIL = {cid: c["email"] for cid, c in INIT_CONFIG["customers"].items()}
PENDING = {o["customer_id"]: oid for oid, o in INIT_CONFIG["orders"].items() if o["status"] == "pending"}
DELIVERED = {o["customer_id"]: oid for oid, o in INIT_CONFIG["orders"].items() if o["status"] == "delivered"}
SKU = {n: sku for sku, (n, _, _) in PRODUCTS.items()}


def _qty(oid: str, sku: str) -> str:
    """Expression: quantity of `sku` in order `oid` (0 when absent)."""
    return f"sum(i['quantity'] for i in s['orders'][{oid!r}]['items'] if i['sku'] == {sku!r})"


def _init_qty(oid: str, sku: str) -> int:
    return sum(i["quantity"] for i in INIT_CONFIG["orders"][oid]["items"] if i["sku"] == sku)


def _stock(sku: str) -> str:
    return f"s['products'][{sku!r}]['stock']"


def _lookup(cust: str, status: str) -> list:
    return [call("get_customer_by_email", email=EMAIL[cust]), call("list_orders", customer_id=cust, status=status)]


def build(book: TaskBook) -> None:
    # Add a product to the customer's pending order.
    for cust, name, q, query in [("U-501", "Merino Wool Socks", 2, "socks"), ("U-503", "Headlamp 300lm", 1, "headlamp"),
                                 ("U-502", "Camping Mug", 4, "mug"), ("U-501", "Headlamp 300lm", 1, "headlamp"),
                                 ("U-503", "Trail Running Shoes", 1, "running shoes"),
                                 ("U-502", "Merino Wool Socks", 5, "socks"),
                                 ("U-501", "Packable Rain Jacket", 1, "rain jacket")]:
        oid, sku = PENDING[cust], SKU[name]
        book.add(f"The customer with email {EMAIL[cust]} wants {q} x {name} added to their pending order.",
                 [check(f"{oid} has {_init_qty(oid, sku) + q} x {sku}", f"{_qty(oid, sku)} == {_init_qty(oid, sku) + q}"),
                  check(f"stock of {sku} reduced by {q}", f"{_stock(sku)} == {PRODUCTS[sku][2] - q}")],
                 _lookup(cust, "pending") + [call("search_products", query=query),
                                              call("add_item_to_order", order_id=oid, sku=sku, quantity=q)])

    # Change a quantity, or drop a line, in a pending order.
    for cust, name, q in [("U-503", "Merino Wool Socks", 1), ("U-501", "Trail Running Shoes", 2),
                          ("U-502", "Packable Rain Jacket", 2)]:
        oid, sku = PENDING[cust], SKU[name]
        old = _init_qty(oid, sku)
        book.add(f"The customer with email {EMAIL[cust]} wants exactly {q} x {name} in their pending order "
                 f"instead of {old}.",
                 [check(f"{oid} has {q} x {sku}", f"{_qty(oid, sku)} == {q}"),
                  check(f"stock of {sku} adjusted", f"{_stock(sku)} == {PRODUCTS[sku][2] - (q - old)}")],
                 _lookup(cust, "pending") + [call("update_item_quantity", order_id=oid, sku=sku, quantity=q)])
    for name in ["Camping Mug", "Merino Wool Socks"]:
        sku = SKU[name]
        book.add(f"Yuki Tanaka (yuki.t@shopmail.com) no longer wants the {name} in her pending order; "
                 f"remove it but keep the rest.",
                 [check(f"{sku} removed from O-7783", f"{_qty('O-7783', sku)} == 0"),
                  check("O-7783 still pending", "s['orders']['O-7783']['status'] == 'pending'")],
                 _lookup("U-503", "pending") + [call("remove_item_from_order", order_id="O-7783", sku=sku)])

    # Cancel a pending order.
    for cust in ["U-501", "U-502", "U-503"]:
        oid = PENDING[cust]
        first = INIT_CONFIG["orders"][oid]["items"][0]
        sku = first["sku"]
        book.add(f"Cancel the pending order of the customer with email {EMAIL[cust]}.",
                 [check(f"{oid} cancelled", f"s['orders'][{oid!r}]['status'] == 'cancelled'"),
                  check(f"{sku} restocked", f"{_stock(sku)} == {PRODUCTS[sku][2] + first['quantity']}")],
                 _lookup(cust, "pending") + [call("cancel_order", order_id=oid)])

    # Return a delivered order for store credit.
    for cust in ["U-502", "U-501"]:
        oid = DELIVERED[cust]
        credit = INIT_CONFIG["customers"][cust]["store_credit"] + INIT_CONFIG["orders"][oid]["total"]
        book.add(f"The customer with email {EMAIL[cust]} is sending back their delivered order. Process the "
                 f"return so they get store credit.",
                 [check(f"{oid} returned", f"s['orders'][{oid!r}]['status'] == 'returned'"),
                  check(f"store credit is {credit}", close(f"s['customers'][{cust!r}]['store_credit']", credit))],
                 _lookup(cust, "delivered") + [call("return_order", order_id=oid)])

    # New shipping address.
    for cust, address in [("U-501", "7 Station Road, Harrogate"), ("U-502", "21 Park Row, Bristol"),
                          ("U-503", "5 Castle Gate, Durham")]:
        oid = PENDING[cust]
        book.add(f"The customer with email {EMAIL[cust]} moved. Ship their pending order to: {address}.",
                 [check(f"{oid} address updated", f"s['orders'][{oid!r}]['shipping_address'] == {address!r}")],
                 _lookup(cust, "pending") + [call("update_shipping_address", order_id=oid, address=address)])

    # Substitute an out-of-stock product.
    for cust in ["U-503", "U-501", "U-502"]:
        oid = PENDING[cust]
        book.add(f"The customer with email {EMAIL[cust]} wants one Insulated Water Bottle added to their pending "
                 f"order. If it is out of stock, add one Camping Mug instead.",
                 [check(f"{oid} has one more camping mug",
                        f"{_qty(oid, 'SKU-1006')} == {_init_qty(oid, 'SKU-1006') + 1}"),
                  check(f"no water bottle in {oid}", f"{_qty(oid, 'SKU-1003')} == 0")],
                 _lookup(cust, "pending") + [call("search_products", query="water bottle"),
                                              call("search_products", query="camping mug"),
                                              call("add_item_to_order", order_id=oid, sku="SKU-1006", quantity=1)])

    # Swap a product inside an order given by number (add first: an order cannot be left empty).
    for oid, old, new, q, query in [("O-7786", "SKU-1005", "SKU-1004", 2, "headlamp"),
                                    ("O-7781", "SKU-1001", "SKU-1002", 3, "socks")]:
        book.add(f"In order {oid}, replace the {PRODUCTS[old][0]} with {q} x {PRODUCTS[new][0]}.",
                 [check(f"{old} gone from {oid}", f"{_qty(oid, old)} == 0"),
                  check(f"{oid} has {q} x {new}", f"{_qty(oid, new)} == {q}"),
                  check(f"{oid} total is {q * PRICES[new]}", close(f"s['orders'][{oid!r}]['total']", q * PRICES[new]))],
                 [call("get_order", order_id=oid), call("search_products", query=query),
                  call("add_item_to_order", order_id=oid, sku=new, quantity=q),
                  call("remove_item_from_order", order_id=oid, sku=old)])

    book.add("Hannah Cole (hannah.cole@shopmail.com): cancel her pending order and return her delivered order.",
             [check("O-7781 cancelled", "s['orders']['O-7781']['status'] == 'cancelled'"),
              check("O-7785 returned", "s['orders']['O-7785']['status'] == 'returned'"),
              check("store credit 19.0", close("s['customers']['U-501']['store_credit']", 19.0))],
             [call("get_customer_by_email", email=EMAIL["U-501"]), call("list_orders", customer_id="U-501"),
              call("cancel_order", order_id="O-7781"), call("return_order", order_id="O-7785")])
