"""The ACEBench phone platform: device (BaseApi), messages, reminders and a food delivery app.

Our own implementation, written from the function docs and the published tasks and final states.
The default state (users, the six stored messages, three reminders, the food platform's accounts) is
the state those final states start from; menus and prices are ours, chosen to agree with the orders
in the answers (e.g. Jiutian BBQ has exactly one dish under 120 yuan).

Rules (inferred from the consistent entries; see the package docstring for the entries that break them):
  - Messages and reminders need the device to be logged in (`login_device`); sending a message also
    needs WiFi (`turn_on_wifi`). Reading, searching and deleting work offline.
  - The message store holds at most `MessageApi.CAPACITY` = 6 messages: sending to a full store fails,
    so the agent must delete one first. "Latest"/"earliest" refer to the messages' send dates; a message
    sent in the episode carries no date (as in the answers) and counts as newer than any dated one.
  - New message ids and reminder slots count on from the highest ever used (6 and 3 by default), so
    the first new message is 7 and the first new reminder is key "4" with `reminder_id` 4.
  - The food platform needs WiFi but not the device login; ordering needs the user logged in to the
    platform and enough balance, and product names must match the menu (case aside).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from evaluation.agentic.acebench.common import ScenarioApi, ToolError, next_key

PHONE_USERS = {"Eve": "USR100", "Frank": "USR101", "Grace": "USR102", "Helen": "USR103", "Isaac": "USR104",
               "Jack": "USR105"}
"""Message-app user name -> user id."""


def _lookup(table: dict[str, Any], name: Any, what: str) -> str:
    """The table key equal to `name` (case and surrounding blanks aside)."""
    wanted = str(name).strip().casefold()
    for key in table:
        if key.casefold() == wanted:
            return key
    raise ToolError(f"unknown {what} {name!r}; known: {', '.join(table)}")


class BaseApi(ScenarioApi):
    """The device: WiFi and the screen login, shared by the apps."""

    NAME = "BaseApi"
    FIELDS = ("wifi", "logged_in")
    TOOLS = ("turn_on_wifi", "login_device")

    def __init__(self) -> None:
        self.wifi = False
        self.logged_in = False

    def turn_on_wifi(self) -> str:
        self.wifi = True
        return "WiFi is on."

    def login_device(self) -> str:
        self.logged_in = True
        return "The device is logged in."

    def require_wifi(self) -> None:
        if not self.wifi:
            raise ToolError("WiFi is off; call turn_on_wifi first")

    def require_login(self) -> None:
        if not self.logged_in:
            raise ToolError("the device is not logged in; call login_device first")


class MessageApi(ScenarioApi):
    NAME = "MessageApi"
    FIELDS = ("inbox",)
    TOOLS = ("send_message", "view_messages_between_users", "delete_message", "search_messages",
             "get_latest_message_id", "get_earliest_message_id")
    CAPACITY = 6

    def __init__(self, base: BaseApi) -> None:
        self.base = base
        self._last_id = 0
        self.inbox: dict[str, dict[str, Any]] = {
            "1": _msg("Eve", "Frank", "Hey Frank, don't forget about our meeting on 2024-06-11 at 4 PM in "
                                      "Conference Room 1.", "2024-06-09"),
            "2": _msg("Frank", "Grace", "Can you help me order a \"Margherita Pizza\" delivery? The merchant is "
                                        "Domino's.", "2024-03-09"),
            "3": _msg("Grace", "Helen", "Please check the milk tea delivery options available from Heytea and "
                                        "purchase a cheaper milk tea for me. After making the purchase, remember "
                                        "to reply to me with \"Already bought.\"", "2023-12-05"),
            "4": _msg("Helen", "Grace", "No problem Helen, I can assist you.", "2024-09-09"),
            "5": _msg("Isaac", "Jack", "Isaac, are you available for a call?", "2024-06-06"),
            "6": _msg("Jack", "Isaac", "Yes Jack, let's do it in 30 minutes.", "2024-01-15"),
        }

    def send_message(self, sender_name: str, receiver_name: str, message: str) -> dict[str, Any]:
        self.base.require_login()
        self.base.require_wifi()
        sender, receiver = _lookup(PHONE_USERS, sender_name, "user"), _lookup(PHONE_USERS, receiver_name, "user")
        if not message.strip():
            raise ToolError("the message is empty")
        if len(self.inbox) >= self.CAPACITY:
            raise ToolError(f"message storage is full ({len(self.inbox)}/{self.CAPACITY}); delete a message first")
        self._last_id = next_key(self.inbox, self._last_id)
        self.inbox[str(self._last_id)] = {"sender_id": PHONE_USERS[sender], "receiver_id": PHONE_USERS[receiver],
                                          "message": message}
        return {"status": "sent", "message_id": self._last_id}

    def view_messages_between_users(self, sender_name: str, receiver_name: str) -> list[dict[str, Any]] | str:
        self.base.require_login()
        sender, receiver = _lookup(PHONE_USERS, sender_name, "user"), _lookup(PHONE_USERS, receiver_name, "user")
        found = [self._view(k, m) for k, m in self.inbox.items()
                 if m["sender_id"] == PHONE_USERS[sender] and m["receiver_id"] == PHONE_USERS[receiver]]
        return found or f"No messages from {sender} to {receiver}."

    def delete_message(self, message_id: int) -> str:
        self.base.require_login()
        if str(message_id) not in self.inbox:
            raise ToolError(f"no message with id {message_id}")
        del self.inbox[str(message_id)]
        return f"Message {message_id} deleted."

    def search_messages(self, user_name: str, keyword: str) -> list[dict[str, Any]] | str:
        """Messages sent by `user_name` whose text contains `keyword` (case-insensitive)."""
        self.base.require_login()
        user = _lookup(PHONE_USERS, user_name, "user")
        found = [self._view(k, m) for k, m in self.inbox.items()
                 if m["sender_id"] == PHONE_USERS[user] and keyword.casefold() in m["message"].casefold()]
        return found or f"No messages from {user} contain {keyword!r}."

    def get_latest_message_id(self) -> dict[str, int]:
        self.base.require_login()
        return {"message_id": int(max(self._by_date(), key=self._date_key))}

    def get_earliest_message_id(self) -> dict[str, int]:
        self.base.require_login()
        return {"message_id": int(min(self._by_date(), key=self._date_key))}

    def _by_date(self) -> list[str]:
        if not self.inbox:
            raise ToolError("there are no messages")
        return list(self.inbox)

    def _date_key(self, key: str) -> tuple[bool, str, int]:
        time = self.inbox[key].get("time")
        return time is None, time or "", int(key)

    def _view(self, key: str, m: dict[str, Any]) -> dict[str, Any]:
        names = {v: k for k, v in PHONE_USERS.items()}
        view = {"message_id": int(key), "sender_name": names.get(m["sender_id"], m["sender_id"]),
                "receiver_name": names.get(m["receiver_id"], m["receiver_id"]), "message": m["message"]}
        if "time" in m:
            view["time"] = m["time"]
        return view


def _msg(sender: str, receiver: str, text: str, time: str) -> dict[str, Any]:
    return {"sender_id": PHONE_USERS[sender], "receiver_id": PHONE_USERS[receiver], "message": text, "time": time}


class ReminderApi(ScenarioApi):
    NAME = "ReminderApi"
    FIELDS = ("reminder_list",)
    TOOLS = ("add_reminder", "view_reminder_by_title", "search_reminders")
    TIME_FORMAT = "%Y-%m-%d %H:%M"

    def __init__(self, base: BaseApi) -> None:
        self.base = base
        self._last_key = 0
        self.reminder_list: dict[str, dict[str, Any]] = {
            "1": _reminder(1001, "Doctor's Appointment", "Visit Dr. Smith for a checkup.", "2024-07-15 09:30"),
            "2": _reminder(1002, "Team Meeting", "Monthly project review with the team.", "2024-07-17 11:00"),
            "3": _reminder(1003, "To-do list", "First, help Frank place a food delivery order at \"Hema Fresh,\" "
                           "ordering two \"Fresh Gift Packs.\" Then, send a message to Frank saying, \"The price of "
                           "the purchased goods is () yuan.\" Replace the parentheses with the actual amount, "
                           "keeping one decimal place.", "2024-07-16 11:00"),
        }

    def add_reminder(self, title: str, description: str, time: str) -> dict[str, Any]:
        self.base.require_login()
        try:
            datetime.strptime(time, self.TIME_FORMAT)
        except ValueError:
            raise ToolError(f"time must be in the format YYYY-MM-DD HH:MM, got {time!r}") from None
        if not title.strip():
            raise ToolError("the title is empty")
        self._last_key = next_key(self.reminder_list, self._last_key)
        self.reminder_list[str(self._last_key)] = _reminder(self._last_key, title, description, time)
        return {"status": "added", "reminder_id": self._last_key}

    def view_reminder_by_title(self, title: str) -> list[dict[str, Any]]:
        self.base.require_login()
        found = [r for r in self.reminder_list.values() if r["title"].casefold() == title.strip().casefold()]
        if not found:
            raise ToolError(f"no reminder titled {title!r}")
        return found

    def search_reminders(self, keyword: str) -> list[dict[str, Any]] | str:
        self.base.require_login()
        k = keyword.casefold()
        found = [r for r in self.reminder_list.values()
                 if k in r["title"].casefold() or k in r["description"].casefold()]
        return found or f"No reminders contain {keyword!r}."


def _reminder(reminder_id: int, title: str, description: str, time: str) -> dict[str, Any]:
    return {"reminder_id": reminder_id, "title": title, "description": description, "time": time, "notified": False}


MERCHANTS: dict[str, dict[str, float]] = {
    "Domino's": {"Margherita Pizza": 68.0, "Super Supreme Pizza": 88.0, "Pepperoni Pizza": 78.0},
    "Jiutian BBQ": {"Grilled Pork Belly": 78.0, "Lamb Skewer Platter": 128.0, "Beef Short Ribs": 158.0},
    "Rice Village Bibimbap": {"Stone Pot Bibimbap": 35.0, "Korean Beef Bibimbap": 45.0, "Seafood Bibimbap": 52.0},
    "Heytea": {"Four Seasons Spring Milk Tea": 22.0, "Brown Sugar Boba Milk Tea": 28.0, "Cheese Grape Milk Tea": 30.0},
    "Hema Fresh": {"Fresh Gift Pack": 99.0, "Seasonal Fruit Box": 59.0},
}
"""Merchant -> product -> unit price (yuan)."""


class FoodPlatform(ScenarioApi):
    NAME = "FoodPlatform"
    FIELDS = ("users", "logged_in_users", "orders")
    TOOLS = ("login_food_platform", "check_balance", "add_food_delivery_order", "get_products")

    def __init__(self, base: BaseApi) -> None:
        self.base = base
        accounts = [("Eve", "U100", "password123", 500.0), ("Frank", "U101", "password456", 300.0),
                    ("Grace", "U102", "password789", 150.0), ("Helen", "U103", "password321", 800.0),
                    ("Isaac", "U104", "password654", 400.0), ("Jack", "U105", "password654", 120.0)]
        self.users: dict[str, dict[str, Any]] = {
            name: {"user_id": uid, "password": pw, "balance": balance} for name, uid, pw, balance in accounts}
        self.logged_in_users: list[str] = []
        self.orders: list[dict[str, Any]] = []

    def login_food_platform(self, username: str, password: str) -> str:
        self.base.require_wifi()
        user = _lookup(self.users, username, "food platform user")
        if self.users[user]["password"] != password:
            raise ToolError("wrong password")
        if user not in self.logged_in_users:
            self.logged_in_users.append(user)
        return f"{user} is logged in to the food platform."

    def check_balance(self, user_name: str) -> dict[str, Any]:
        user = self._require_user_login(user_name)
        return {"user_name": user, "balance": self.users[user]["balance"]}

    def get_products(self, merchant_name: str) -> list[dict[str, Any]]:
        self.base.require_wifi()
        merchant = _lookup(MERCHANTS, merchant_name, "merchant")
        return [{"product": p, "price": price} for p, price in MERCHANTS[merchant].items()]

    def add_food_delivery_order(self, username: str, merchant_name: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        user = self._require_user_login(username)
        merchant = _lookup(MERCHANTS, merchant_name, "merchant")
        if not items:
            raise ToolError("the order has no items")
        lines = []
        for item in items:
            product = _lookup(MERCHANTS[merchant], item["product"], f"product at {merchant}")
            if item["quantity"] < 1:
                raise ToolError(f"quantity of {product!r} must be at least 1")
            lines.append({"product": product, "quantity": item["quantity"],
                          "price_per_unit": MERCHANTS[merchant][product]})
        total = sum(line["quantity"] * line["price_per_unit"] for line in lines)
        balance = self.users[user]["balance"]
        if total > balance:
            raise ToolError(f"insufficient balance: the order costs {total} yuan, {user} has {balance}")
        self.users[user]["balance"] -= total
        order = {"user_name": user, "merchant_name": merchant, "items": lines, "total_price": total}
        self.orders.append(order)
        return {"status": "ordered", **order, "remaining_balance": self.users[user]["balance"]}

    def _require_user_login(self, username: str) -> str:
        self.base.require_wifi()
        user = _lookup(self.users, username, "food platform user")
        if user not in self.logged_in_users:
            raise ToolError(f"{user} is not logged in to the food platform; call login_food_platform first")
        return user


def make_phone() -> list[ScenarioApi]:
    base = BaseApi()
    return [base, MessageApi(base), ReminderApi(base), FoodPlatform(base)]
