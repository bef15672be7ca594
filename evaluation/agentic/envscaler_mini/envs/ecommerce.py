import copy
from typing import Optional


class OnlineStoreOrders:
    """Customer service console of an outdoor-gear web shop: customers (found by email), the product
    catalogue with stock levels, and orders with their line items.

    Rules:
    - Only pending orders can be edited (items, quantities, address) or cancelled.
    - Adding or increasing an item takes stock; removing, reducing or cancelling puts it back.
    - A quantity must be at least 1 and at most what is in stock.
    - An order must keep at least one item; cancel it instead of removing the last one.
    - Only delivered orders can be returned; the order total is refunded as store credit.
    """

    def __init__(self, init_config: Optional[dict] = None):
        self.customers = {}
        self.products = {}
        self.orders = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _pending(self, order_id):
        order = self.orders.get(order_id)
        if order is None:
            return None, {"success": False, "error": f"Order '{order_id}' not found."}
        if order["status"] != "pending":
            return None, {"success": False, "error": f"Order {order_id} is {order['status']}; "
                                                     "only pending orders can be changed."}
        return order, None

    def _retotal(self, order):
        order["total"] = round(sum(i["quantity"] * i["unit_price"] for i in order["items"]), 2)

    def _line(self, order, sku):
        for item in order["items"]:
            if item["sku"] == sku:
                return item
        return None

    # -- query tools --

    def get_customer_by_email(self, email: str) -> dict:
        """Find a customer account by email address.

        Args:
            email: The customer's email address.
        """
        for cid, customer in self.customers.items():
            if customer["email"].lower() == email.strip().lower():
                return {"success": True, "data": {"customer_id": cid, **customer}}
        return {"success": False, "error": f"No customer with email '{email}'."}

    def list_orders(self, customer_id: str, status: Optional[str] = None) -> dict:
        """List a customer's orders, optionally only those with a given status.

        Args:
            customer_id: Internal customer id.
            status: Optional filter: pending, shipped, delivered, cancelled or returned.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"Customer id '{customer_id}' not found."}
        found = [{"order_id": oid, **o} for oid, o in self.orders.items()
                 if o["customer_id"] == customer_id and (status is None or o["status"] == status)]
        return {"success": True, "data": found}

    def get_order(self, order_id: str) -> dict:
        """Get one order with its items, total and status.

        Args:
            order_id: Order id, e.g. 'O-7781'.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"Order '{order_id}' not found."}
        return {"success": True, "data": {"order_id": order_id, **order}}

    def search_products(self, query: str) -> dict:
        """Search the catalogue by product name (case-insensitive substring); returns sku, price and stock.

        Args:
            query: Part of the product name.
        """
        needle = query.strip().lower()
        found = [{"sku": sku, **p} for sku, p in self.products.items() if needle in p["name"].lower()]
        if not found:
            return {"success": False, "error": f"No product matches '{query}'."}
        return {"success": True, "data": found}

    # -- modification tools --

    def add_item_to_order(self, order_id: str, sku: str, quantity: int) -> dict:
        """Add units of a product to a pending order (merged with an existing line of the same sku).

        Args:
            order_id: Order id.
            sku: Product sku.
            quantity: Units to add (at least 1).
        """
        order, error = self._pending(order_id)
        if error:
            return error
        product = self.products.get(sku)
        if product is None:
            return {"success": False, "error": f"Product '{sku}' not found."}
        if quantity < 1:
            return {"success": False, "error": "Quantity must be at least 1."}
        if product["stock"] < quantity:
            return {"success": False, "error": f"Only {product['stock']} of {product['name']} in stock."}
        line = self._line(order, sku)
        if line is None:
            order["items"].append({"sku": sku, "quantity": quantity, "unit_price": product["price"]})
        else:
            line["quantity"] += quantity
        product["stock"] -= quantity
        self._retotal(order)
        return {"success": True, "data": {"order_id": order_id, **order}}

    def update_item_quantity(self, order_id: str, sku: str, quantity: int) -> dict:
        """Set the quantity of an item already in a pending order.

        Args:
            order_id: Order id.
            sku: Product sku of the line to change.
            quantity: New quantity (at least 1).
        """
        order, error = self._pending(order_id)
        if error:
            return error
        line = self._line(order, sku)
        if line is None:
            return {"success": False, "error": f"Order {order_id} has no item '{sku}'."}
        if quantity < 1:
            return {"success": False, "error": "Quantity must be at least 1; use remove_item_from_order to drop it."}
        product = self.products[sku]
        extra = quantity - line["quantity"]
        if extra > product["stock"]:
            return {"success": False, "error": f"Only {product['stock']} more of {product['name']} in stock."}
        product["stock"] -= extra
        line["quantity"] = quantity
        self._retotal(order)
        return {"success": True, "data": {"order_id": order_id, **order}}

    def remove_item_from_order(self, order_id: str, sku: str) -> dict:
        """Remove an item line from a pending order and put its units back in stock.

        Args:
            order_id: Order id.
            sku: Product sku of the line to remove.
        """
        order, error = self._pending(order_id)
        if error:
            return error
        line = self._line(order, sku)
        if line is None:
            return {"success": False, "error": f"Order {order_id} has no item '{sku}'."}
        if len(order["items"]) == 1:
            return {"success": False, "error": "That is the last item; cancel the order instead."}
        order["items"].remove(line)
        self.products[sku]["stock"] += line["quantity"]
        self._retotal(order)
        return {"success": True, "data": {"order_id": order_id, **order}}

    def update_shipping_address(self, order_id: str, address: str) -> dict:
        """Change the shipping address of a pending order.

        Args:
            order_id: Order id.
            address: Full new address.
        """
        order, error = self._pending(order_id)
        if error:
            return error
        if len(address.strip()) < 5:
            return {"success": False, "error": "Address is too short."}
        order["shipping_address"] = address.strip()
        return {"success": True, "data": {"order_id": order_id, **order}}

    def cancel_order(self, order_id: str) -> dict:
        """Cancel a pending order and restock its items.

        Args:
            order_id: Order id.
        """
        order, error = self._pending(order_id)
        if error:
            return error
        for item in order["items"]:
            self.products[item["sku"]]["stock"] += item["quantity"]
        order["status"] = "cancelled"
        return {"success": True, "data": {"order_id": order_id, "status": "cancelled"}}

    def return_order(self, order_id: str) -> dict:
        """Return a delivered order: restock it and refund its total as store credit.

        Args:
            order_id: Order id.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"Order '{order_id}' not found."}
        if order["status"] != "delivered":
            return {"success": False, "error": f"Order {order_id} is {order['status']}; "
                                               "only delivered orders can be returned."}
        for item in order["items"]:
            self.products[item["sku"]]["stock"] += item["quantity"]
        order["status"] = "returned"
        customer = self.customers[order["customer_id"]]
        customer["store_credit"] = round(customer["store_credit"] + order["total"], 2)
        return {"success": True, "data": {"order_id": order_id, "refunded_credit": order["total"],
                                          "store_credit": customer["store_credit"]}}
