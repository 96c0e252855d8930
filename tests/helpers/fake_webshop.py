"""A deterministic WebShop-like backend for tests: a search page, a results page and an item page over three
products. Goal i asks for product i % 3 (in size small or large where it has sizes); buying pays 1 for the
right product and size, 0.5 for the right product in another size, 0 otherwise. The store has 1,502 goals,
so WebShop's split puts goals 0-499 in test and 1500-1501 in train.
"""

from __future__ import annotations

from r3l.envs.webshop import Page, WebShopBackend

PRODUCTS = {
    "b001": ("red cotton t-shirt", ("small", "large")),
    "b002": ("blue wool sweater", ("small", "large")),
    "b003": ("red wool scarf", ()),
}
GOALS = 1502


def goal(index: int) -> tuple[str, str | None]:
    """(product id, size or None) that goal `index` asks for."""
    product = sorted(PRODUCTS)[index % 3]
    sizes = PRODUCTS[product][1]
    return product, (sizes[(index // 3) % 2] if sizes else None)


def instruction(index: int) -> str:
    product, size = goal(index)
    return f"i need a {PRODUCTS[product][0]}" + (f" in size {size}" if size else "")


def solution(index: int) -> list[str]:
    product, size = goal(index)
    return (
        [f"search[{PRODUCTS[product][0]}]", f"click[{product}]"]
        + ([f"click[{size}]"] if size else [])
        + ["click[buy now]"]
    )


class FakeWebShop(WebShopBackend):
    def __init__(self):
        self.played: list[str] = []  # every action the store received
        self.closed = 0

    def goal_count(self) -> int:
        return GOALS

    def reset(self, goal: int) -> Page:
        self.goal, self.results, self.item, self.size = goal, (), None, None
        return self._search_page()

    def step(self, action: str) -> Page:
        self.played.append(action)
        kind, _, argument = action.partition("[")
        argument = argument[:-1]
        if kind == "search":
            words = set(argument.split())
            scored = sorted((-len(words & set(title.split())), product) for product, (title, _) in PRODUCTS.items())
            self.results = tuple(product for overlap, product in scored if overlap < 0)
            return self._results_page()
        if argument == "back to search":
            return self._search_page()
        if argument == "< prev":
            return self._results_page()
        if argument in self.results and self.item is None:
            self.item, self.size = argument, None
            return self._item_page()
        if self.item and argument in PRODUCTS[self.item][1]:
            self.size = argument
            return self._item_page()
        if self.item and argument == "buy now":
            wanted, size = goal(self.goal)
            reward = (1.0 if self.size == size else 0.5) if self.item == wanted else 0.0
            return Page(f"Thank you for shopping with us! Your score: {reward}", False, (), reward, True)
        raise AssertionError(f"the fake shop was sent an action its page does not offer: {action}")

    def close(self) -> None:
        self.closed += 1

    def _search_page(self) -> Page:
        self.item = None
        return Page(f"WebShop [SEP] Instruction: [SEP] {instruction(self.goal)} [SEP] Search", True, ())

    def _results_page(self) -> Page:
        self.item = None
        listing = " [SEP] ".join(f"{product} [SEP] {PRODUCTS[product][0]}" for product in self.results)
        page = f"Instruction: [SEP] {instruction(self.goal)} [SEP] Back to Search [SEP] {listing or 'No results.'}"
        return Page(page, False, ("back to search",) + self.results)

    def _item_page(self) -> Page:
        title, sizes = PRODUCTS[self.item]
        chosen = f" [SEP] You have clicked {self.size}" if self.size else ""
        return Page(
            f"Instruction: [SEP] {instruction(self.goal)} [SEP] {title}{chosen} [SEP] Buy Now",
            False,
            ("back to search", "< prev") + sizes + ("buy now",),
        )
